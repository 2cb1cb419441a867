"""The interruptible tier inside `decide()`: the bid each create carries, and what becomes of a bid
rental an outbid paused or that resumed by itself. A verified rental is let go with an explicit
stop, never destroyed, so it cannot resume by itself and bill unwatched."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..decisions import AttemptView, Create, Decision, Finish, Move, Rebid, Resume, Stop
from ..lifecycle import Phase
from ..models import Offer
from .tier import (
    MOVE_SHARE,
    OUTPUT_WAIT_S,
    REBID_STEP,
    WAIT_S,
    Tier,
    bid_for,
    bid_top,
    checkpoint_every_s,
    exposure,
    lower_bid,
    outbid_rate,
    tier_cost,
    worth_bidding,
)


@dataclass(frozen=True, slots=True)
class BidTerms:
    """What the rules need of the tier: the next job's tier, the campaign's `rental` and bid cap,
    the checkpoint interval, each machine's record on bid, and the share of outbids that moved."""

    tier: Tier
    rental: str
    cap: float | None = None
    checkpoint_s: float = 600.0
    exposure: tuple[tuple[int, str, float, int], ...] = ()
    move_share: float = MOVE_SHARE  # the share of outbids that end in a move (`move_share`)

    def rate(self, machine_id: int | None, gpu: str) -> float:
        mine, model = exposure(self.exposure, -1 if machine_id is None else machine_id, gpu)
        return outbid_rate(mine, model)


def offer_bid(offer: Offer, terms: BidTerms) -> tuple[float | None, str]:
    """The bid to create `offer` with (None: on-demand), and why."""
    rate = terms.rate(offer.machine_id, offer.gpu_name)
    bid = bid_for(offer.bid_floor, offer.gpu_dph, rate, terms.cap)
    if bid is None:
        return None, "no bid under the caps: on-demand"
    ckpt = checkpoint_every_s(terms.checkpoint_s, rate)
    share = terms.move_share
    if terms.rental == "auto" and not worth_bidding(bid, offer.gpu_dph, rate, ckpt, share):
        cost = tier_cost(1.0, bid, offer.gpu_dph, rate, ckpt, share)
        return None, (
            f"auto: a bid of ${bid:.4f}/h at {rate:.2f} outbids/h, {share:.0%} of them moves "
            f"(the ledger's), costs "
            f"${cost:.4f} an hour of work, work lost and moves in, over on-demand "
            f"${offer.gpu_dph:.4f}/h: on-demand"
        )
    return bid, (
        f"bid ${bid:.4f}/h (bid_floor ${offer.bid_floor or 0:.4f}/h, on-demand "
        f"${offer.gpu_dph:.4f}/h, {rate:.2f} outbids/h expected)"
    )


def as_rented(offers: Sequence[Offer] | None, terms: BidTerms | None) -> tuple[Offer, ...] | None:
    """Under the tier, each offer at the price its create would pay (`offer_bid`). A bid search
    prices offers at their bid floor, which an on-demand rental never pays: on held-out 777:6 an
    A6000 ranked at $0.29/h was rented at $0.70/h (docs/benchmarks.md)."""
    if offers is None or terms is None or terms.tier != "interruptible":
        return None if offers is None else tuple(offers)
    out = []
    for o in offers:
        listed = o.bid_floor if o.bid_floor is not None and o.bid_floor > 0 else o.gpu_dph
        bid, _ = offer_bid(o, terms)
        paid = o.gpu_dph if bid is None else bid
        out.append(replace(o, dph_total=round(paid + max(0.0, o.dph_total - listed), 6)))
    return tuple(out)


def priced(out: Sequence[Decision], terms: BidTerms | None) -> list[Decision]:
    """Each create on the tier carries its bid; the rest pass as they are."""
    if terms is None or terms.tier != "interruptible":
        return list(out)
    done: list[Decision] = []
    for d in out:
        if isinstance(d, Create) and d.offer is not None and d.bid is None:
            bid, why = offer_bid(d.offer, terms)
            d = replace(d, bid=bid, why=f"{d.why}; {why}" if d.why else why)
        done.append(d)
    return done


def tier_ran_dry(terms: BidTerms, out: Sequence[Decision]) -> bool:
    """Under `auto`, the rules would end for want of fit offers on the tier. A bid search leaves out
    machines held on-demand, so search those and decide again before ending."""
    return (
        terms.rental == "auto"
        and terms.tier == "interruptible"
        and any(isinstance(d, Finish) and d.rule == "rule:no_offers" for d in out)
    )


def tier_rules(
    a: AttemptView, terms: BidTerms | None, work_waiting: bool, now: float
) -> Decision | None:
    """A proven bid rental out of service (phase STOPPED): paused by an outbid, rebid, wait or
    let go; resumed by itself, back into service when work waits for it, else stopped."""
    if a.bid is None or a.phase != Phase.STOPPED or not a.passed_preflight:
        return None
    if a.resumed:
        # it bills again: stopped explicitly (an explicit stop does not resume by itself) unless
        # a job runs or is wanted on it; a resume nobody catches leaks
        if not a.busy and not work_waiting:
            why = (
                f"resumed by itself at ${a.bid:.4f}/h with no work for it: stopped before it bills"
            )
            return Stop(a.instance_id, "rule:resume_unneeded", why)
        return Resume(
            a.instance_id, "rule:resumed", f"resumed by itself at ${a.bid:.4f}/h: work waits"
        )
    if a.outbid_at is None:
        return None
    # rebid over the new floor under the caps (twice at most); else wait for the resume, longer
    # where all it holds is an exited job's output (a pause bills storage only); then let go
    paused_s, floor = now - a.outbid_at, a.bid_floor
    top = bid_top(a.on_demand_dph, terms.cap if terms is not None else None)
    if floor is not None and a.rebids < 2 and floor > a.bid:
        price = round(min(floor * (1 + REBID_STEP), top), 4)
        if price >= floor and price > a.bid:
            why = f"bid_floor ${floor:.4f}/h over our ${a.bid:.4f}/h: rebid"
            return Rebid(a.instance_id, price, "rule:rebid", why)
    if paused_s < (OUTPUT_WAIT_S if a.busy else WAIT_S):
        return None  # wait: it may resume with its disk, image and data
    if not work_waiting:
        why = "outbid with no job: left stopped, not resumed for us"
        return Stop(a.instance_id, "rule:outbid_hold", why)
    why = "no rebid under the cap" if floor is None or floor > top else "rebids spent"
    return Move(
        a.instance_id,
        "rule:outbid_move",
        f"outbid {paused_s / 60:.1f} min, {why}: job moves from its checkpoint "
        "(verified: stays stopped for the operator)",
    )


def coming_back(a: AttemptView, rebid_now: bool, now: float) -> bool:
    """A proven bid rental an outbid paused that a rebid brings back (rebid this poll, its bid
    already clearing, within `WAIT_S`, or resumed and not yet in service). Rebid rentals resumed
    within 4 minutes (22 of 37 outbids on family 31), so the fleet counts it as held. One holding
    an exited job's output is not (`FleetSnapshot.jobs_held`)."""
    if a.phase != Phase.STOPPED or not a.passed_preflight or a.bid is None or a.busy:
        return False
    if a.resumed:  # back by itself: into service this poll where work waits (`tier_rules`)
        return True
    if a.outbid_at is None or now - a.outbid_at >= WAIT_S:
        return False
    return rebid_now or (a.bid_floor is not None and a.bid >= a.bid_floor)


def bid_down(a: AttemptView, terms: BidTerms | None) -> Rebid | None:
    """A proven bid rental in service that a rebid raised, whose bid_floor has fallen back since
    (the rival left): the bid comes down (`bidding.lower_bid`)."""
    if terms is None or a.bid is None or a.raised_from is None or a.bid_floor is None:
        return None
    if a.phase != Phase.VERIFIED or not a.passed_preflight:
        return None
    rate = terms.rate(a.machine_id, a.offer_gpu)
    price = lower_bid(a.bid, a.raised_from, a.bid_floor, a.on_demand_dph, rate, terms.cap)
    if price is None:
        return None
    why = f"bid_floor back to ${a.bid_floor:.4f}/h: bid ${a.bid:.4f} -> ${price:.4f}/h"
    return Rebid(a.instance_id, price, "rule:bid_down", why)
