"""What a campaign would rent if it started now, asked of the engine itself: a supervisor built as a
start builds it, its decider asked as its first poll would. Nothing is rented or written."""

from __future__ import annotations

from dataclasses import dataclass

import asyncssh

from ..core.bidding.rules import as_rented
from ..core.campaign import Campaign, Job
from ..core.decisions import Decision, FleetSnapshot
from ..core.models import Offer
from ..core.offers.choice import unfit_reason
from ..core.offers.picks import Pick, picks
from ..core.policy import Policy
from ..ledger import Ledger
from ..market.protocol import Market
from .hosts.ssh import SSHRunner
from .supervisor import Supervisor


class SearchFailed(Exception):
    """The offer search got no answer; `str()` says what the offer book said of it."""


@dataclass(frozen=True)
class Preview:
    snapshot: FleetSnapshot  # what the rules decided on: the offers as listed, the odds, the tier
    decisions: tuple[Decision, ...]
    picks: tuple[Pick, ...]  # every fit offer, in the order the rules would rent them
    unfit: dict[int, str]  # offer id -> why it would not be rented
    gpu_billing: str = "running"  # the market's rule (`Market.gpu_billing`)
    # the jobs still to run, as a start would restore them from the ledger (all of them for a
    # campaign not started yet)
    jobs_left: tuple[Job, ...] = ()

    @property
    def offers(self) -> tuple[Offer, ...]:
        return self.snapshot.offers or ()


async def preview(market: Market, ledger: Ledger, campaign: Campaign, policy: Policy) -> Preview:
    """The engine's own choice now. `ledger` is only read (open it read-only)."""
    said: list[str] = []
    # the runner is never used: no host is reached before a create
    key = asyncssh.generate_private_key("ssh-ed25519")
    sup = Supervisor(market, ledger, campaign, policy, SSHRunner(key), log=said.append)
    now = market.now()
    sup.fleet.restore(ledger, campaign.name, policy, now)
    sup.fleet.heed_team(ledger, policy, now)
    sup.job_work.restore(ledger)
    sup.tier.restore(ledger, now)
    snap, out = await sup.decider.on_offers(now, first_alone=False)
    if snap.offers is None:  # the book says a failed search and keeps going; a preview stops
        raise SearchFailed(said[-1] if said else "no answer")
    ranked = picks(snap, policy, out)
    first_on = {p.listed.machine_id: p.listed.id for p in ranked}
    chosen = set(first_on.values())
    unfit = {}
    # judged at the price each create would pay, as the rules judge them
    for o in as_rented(snap.offers, snap.bidding) or ():
        if o.id in chosen:
            continue
        why = unfit_reason(o, sup.offer_book.terms(), policy, sup.offer_book.exclusions())
        if why is None and o.machine_id in first_on:
            why = f"offer {first_on[o.machine_id]} on the same machine ranks first"
        unfit[o.id] = why or "not ranked"
    left = tuple(sup.job_work.left())
    return Preview(snap, tuple(out), tuple(ranked), unfit, market.gpu_billing, left)
