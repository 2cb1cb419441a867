"""A person ends a campaign: no more creates, then everything it holds stopped, or, when they
typed the campaign's name to confirm it, destroyed, verified rentals included. Every act here
is the person's (actor `human`); automation still never destroys a verified rental (the
destroy of one goes through the operator's confirmed destroy, the only path that may).

After the end the controller keeps serving the person: stop, start and a confirmed destroy
still work on what is left (`intents.AFTER_END`); creates, the wanted fleet and hand-overs, which
would set automation going again, are refused."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ..core.lifecycle import Phase
from ..market.factory import DEFAULT_URL
from .intents import (
    AutomationRefused,
    DestroyConfirmation,
    DestroyIntent,
)
from .operator import HUMAN
from .strays import hold_strays

if TYPE_CHECKING:
    from .attempt import Attempt
    from .supervisor import Supervisor


def end_command(campaign: str, ledger: str | Path, market_url: str, destroy: bool = True) -> str:
    """The `rentwatch end` command for a campaign, as it works when pasted: quoted, the
    ledger's absolute path, and `--market-url` where the market is not Vast's own (`end`
    refuses another market than the one the campaign rented on)."""
    url = market_url.rstrip("/")
    market = f" --market-url {shlex.quote(url)}" if url and url != DEFAULT_URL else ""
    where = str(ledger)
    book = "" if where in ("", ":memory:") else f" --ledger {shlex.quote(_absolute(where))}"
    return f"rentwatch end --campaign {shlex.quote(campaign)}{book}{market}" + (
        " --destroy" if destroy else ""
    )


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


def confirmed(campaign: str, typed: str) -> bool:
    """Ending with a destroy is confirmed by the campaign's name, typed."""
    return typed.strip() == campaign


async def end_campaign(sup: Supervisor, destroy: bool, typed: str = "") -> list[str]:
    """End `sup`'s campaign as a person asked; returns what was done, a line per rental.
    `destroy` needs `typed` to be the campaign's name (AutomationRefused otherwise)."""
    from .supervisor import Outcome

    name = sup.campaign.name
    if destroy and not confirmed(name, typed):
        raise AutomationRefused(
            f"end and destroy of {name} not confirmed: type the campaign's name "
            f"(got {typed.strip()[:40]!r})"
        )
    how = "end and destroy everything" if destroy else "end: stop what it holds"
    reason = f"the campaign was ended by a person ({how})"
    sup.journal.say(f"end    {name}: {how}, by human")
    # no poll from here on may rent a replacement for what is stopped or destroyed below
    if sup.campaign.max_creates > sup.fleet.creates:
        sup.campaign = dataclasses.replace(sup.campaign, max_creates=sup.fleet.creates)
    # and a create already sent is ended as its answer lands (`Actions.create`)
    sup.actions.ended = (HUMAN, reason)
    # what the market holds under the campaign's label and the fleet does not, held first
    await hold_strays(sup.market, sup.actions, sup.recovery, sup.journal, "end   ", wait=False)
    done: list[str] = []
    # what it has on the market, stopped rentals too: a finished campaign's stopped ones
    # bill storage, and "end and destroy everything" is the way to stop that
    for a in list(sup.fleet.on_market()):
        done.append(await _end_one(sup, a, destroy, reason))
    if sup.finished is None:
        sup.finished = Outcome(True, reason)
    return done


async def _end_one(sup: Supervisor, a: Attempt, destroy: bool, reason: str) -> str:
    iid = a.instance_id
    proven = a.passed_preflight or a.life.phase == Phase.VERIFIED
    try:
        if proven and destroy:  # the person's confirmed destroy: the only way for a proven one
            ok = await sup.apply(DestroyIntent(DestroyConfirmation(iid, str(iid)), reason))
            return f"destroyed verified i:{iid}" if ok else f"destroy of i:{iid} FAILED"
        if proven:
            paused = a.life.phase == Phase.STOPPED and a.resumes_by_itself
            if a.life.phase == Phase.STOPPED and not paused:
                return f"i:{iid} was stopped already (storage bills until it is destroyed)"
            # a bid rental the market paused (outbid) resumes by itself: only our stop ends it
            ok = await sup.actions.stop(a, HUMAN, reason)
            what = " (the market had paused it: our stop ends the bid)" if paused else ""
            return f"stopped verified i:{iid}{what}" if ok else f"stop of i:{iid} FAILED"
        # never proven: given up as cancelled (no fault of its host's), then destroyed
        if a.life.phase != Phase.ABANDONED:
            if a.preflight_task:
                a.preflight_task.cancel()
            sup.journal.give_up(a, sup.now(), HUMAN, reason, "cancelled")
        ok = await sup.actions.destroy(a, HUMAN, reason)
        return f"destroyed unverified i:{iid}" if ok else f"destroy of i:{iid} FAILED"
    except AutomationRefused as exc:
        return f"i:{iid}: {exc}"
    except Exception as exc:  # one failure must not keep the rest billing
        sup.journal.say(f"end    i:{iid} FAILED: {exc!r}")
        return f"i:{iid} FAILED: {exc}"
