"""What `rentwatch end` asks the market, beside the ledger: every rental under the campaign's
label is the campaign's until the market shows it gone. A create the ledger left without an
outcome (the controller killed mid-create) is settled here: found by its label, or waited for
a while and then written down as never made. A labelled rental the ledger has no create for
gets one, so that the end lists it and ends it like the rest."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from ..core.models import Instance
from ..core.rows import campaign_label, finite
from ..ledger import EventKind, Ledger
from ..market.protocol import Market

K = EventKind
CREATE_SETTLE_S = 30.0  # wall seconds a create without an outcome is waited for by its label
RELIST_S = 2.0


def labelled(ledger: Ledger, name: str, rows: list[Instance]) -> dict[str, Instance]:
    """The rows carrying a label this ledger wrote into one of the campaign's creates."""
    prefix = campaign_label(name) + ":"
    return {
        i.label: i
        for i in rows
        if i.label and i.label.startswith(prefix) and ledger.wrote_label(name, i.label)
    }


async def settle_creates(
    client: Market,
    ledger: Ledger,
    name: str,
    say: Callable[[str], None],
    wait_s: float = CREATE_SETTLE_S,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Instance]:
    """Settle the campaign's creates without an outcome by their labels (waiting up to
    `wait_s` for one the market does not list yet), and write a create for every labelled
    rental the ledger holds none for. Returns the labelled rows the market lists."""
    open_creates = [
        e for e in ledger.unfinished_intents() if e.campaign == name and e.kind == K.CREATE
    ]
    deadline = monotonic() + wait_s
    while True:
        ours = labelled(ledger, name, await client.list_instances())
        waiting = [e for e in open_creates if str(e.detail.get("label")) not in ours]
        if not waiting or monotonic() > deadline:
            break
        say(f"waiting for {len(waiting)} create(s) without an answer to show under their label")
        await asyncio.sleep(RELIST_S)
    now = client.now()
    for e in open_creates:
        found = ours.get(str(e.detail.get("label")))
        ledger.outcome(
            e.seq,
            at=finite(found.start_date, now) if found else now,
            ok=found is not None,
            error=None if found else f"not listed under its label after {wait_s:.0f} s (end)",
            instance_id=found.id if found else None,
            storage_dph=finite(found.storage_total_cost, 0.0)
            if found and e.storage_dph is None
            else None,
            detail={"reconciled": True},
        )
        if found:
            say(f"found i:{found.id} under its create's label: the controller died mid-create")
    for inst in ours.values():
        if not any(x.kind == K.CREATE and x.ok for x in ledger.instance_history(inst.id)):
            _found_created(ledger, name, inst, now)
            say(f"found i:{inst.id} under the campaign's label with no create in the ledger")
    return ours


def _found_created(ledger: Ledger, name: str, inst: Instance, now: float) -> None:
    ctx: dict[str, Any] = {
        "campaign": name,
        "instance_id": inst.id,
        "machine_id": inst.machine_id,
        "host_id": inst.host_id,
        "gpu_name": inst.gpu_name,
        "gpu_dph": finite(inst.gpu_dph, 0.0),
        "storage_dph": finite(inst.storage_total_cost, 0.0),
    }
    ledger.record(
        K.CREATE,
        at=finite(inst.start_date, now),
        actor="reconcile",
        ok=True,
        reason="found carrying this campaign's label with no create in the ledger (end)",
        detail={"label": inst.label},
        **ctx,
    )
