"""A person ends a campaign: no more creates, then everything it holds stopped, or, with the
campaign's name typed, destroyed, verified rentals included (the person's act, through the
operator's confirmed destroy). After the end only what acts on what is left is taken
(`intents.AFTER_END`)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from ..market.factory import DEFAULT_URL
from .executor import Outcome
from .intents import AutomationRefused, Reply
from .operator import HUMAN
from .release import release

if TYPE_CHECKING:
    from .supervisor import Supervisor


def end_command(campaign: str, ledger: str | Path, market_url: str, destroy: bool = True) -> str:
    """The `rentwatch end` command for a campaign, as it works when pasted: quoted, the ledger's
    absolute path, and `--market-url` where the market is not Vast's own."""
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


async def end_campaign(sup: Supervisor, destroy: bool, typed: str = "") -> Reply:
    """End `sup`'s campaign as a person asked; the reply has a line per rental let go of.
    `destroy` needs `typed` to be the campaign's name (AutomationRefused otherwise)."""
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
    sup.no_more_creates(HUMAN, reason)
    # the jobs at work end with the campaign, their output kept while their hosts still answer
    await sup.job_work.campaign_ended(reason)
    # what the market holds under the campaign's label and the fleet does not, held first
    await sup.recovery.hold_strays("end   ", wait=False)
    # what it has on the market, stopped rentals too: a finished campaign's stopped ones
    # bill storage, and "end and destroy everything" is the way to stop that
    done = await release(sup, sup.fleet.on_market(), HUMAN, reason, keep_proven=not destroy)
    sup.finish(Outcome(True, reason))
    lines = tuple(r.message for r in done)
    return Reply(
        True,
        "; ".join(lines) or "ended: it held nothing",
        tuple(i for r in done for i in r.acted_on),
        tuple(i for r in done for i in r.destroyed),
        lines=lines,
    )
