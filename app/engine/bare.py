"""A bare session for `rentwatch end` when no controller runs: the engine on a ledger and a market,
adopting what the campaign holds as a restarted controller does, but writing no `campaign_start`,
sending no key and watching no host; the end then lets go by the one release rule."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable

import asyncssh

from ..core.campaign import renting_nothing
from ..core.policy import DEFAULT
from ..ledger import EventKind, Ledger
from ..ledger.holdings import read_holdings
from ..market.errors import NotFound
from ..market.protocol import Market
from .hosts.ssh import SSHRunner
from .supervisor import Supervisor

CREATE_SETTLE_S = 30.0  # wall seconds a create without an outcome is waited for by its label
RELIST_S = 2.0


def bare_supervisor(
    market: Market, ledger: Ledger, name: str, log: Callable[[str], None]
) -> Supervisor:
    """A supervisor for campaign `name` that never rents: no fleet, no creates, no reuse of
    stopped rentals, and an SSH key of its own that never leaves the process."""
    policy = dataclasses.replace(DEFAULT, reuse_stopped=False)
    ssh = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"))
    return Supervisor(market, ledger, renting_nothing(name), policy, ssh, log=log)


async def adopt(
    sup: Supervisor,
    wait_s: float = CREATE_SETTLE_S,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """Hold what the campaign has on the market: a create the ledger left without an outcome is
    waited for up to `wait_s` to show under its label; a held rental the market no longer has is
    written off, as a poll would."""
    name = sup.campaign.name
    labels = {
        str(e.detail.get("label"))
        for e in sup.ledger.unfinished_intents()
        if e.campaign == name and e.kind == EventKind.CREATE
    }
    deadline = monotonic() + wait_s
    while labels:
        waiting = labels - {i.label for i in await sup.market.list_instances()}
        if not waiting or monotonic() > deadline:
            break
        sup.journal.say(f"waiting for {len(waiting)} create(s) without an answer to show")
        await asyncio.sleep(RELIST_S)
    sup.recovery.last_alive = sup.ledger.last_event_at(name)
    sup.fleet.restore(sup.ledger, name, sup.policy, sup.now())
    await sup.recovery.reconcile()
    for h in read_holdings(sup.ledger, name):
        if sup.fleet.get(h.instance_id) is not None:
            continue
        try:
            inst = await sup.market.show_instance(h.instance_id)
        except NotFound:
            inst = None
        if inst is not None:  # listed by itself, not in the list: held all the same
            sup.recovery.adopt(inst, sup.market.answered_at())
            continue
        sup.journal.fact(
            EventKind.LOST,
            None,
            ok=True,
            reason="instance gone without our destroy: the market no longer has it",
            instance_id=h.instance_id,
            machine_id=h.machine_id,
        )
        sup.journal.say(f"lost   i:{h.instance_id}: the market no longer has it")
