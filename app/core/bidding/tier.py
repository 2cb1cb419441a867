"""The interruptible tier's decisions, pure: which jobs may go on it, what to bid, why a rental
stopped, and how often to pull a checkpoint (what an outbid does: `rules.tier_rules`).

Vast's rules (vast-ai/docs `instance-types.mdx`, `faq/rental-types.mdx`): on-demand has priority,
the higher bid wins, an outbid instance is stopped with its data kept and resumes by itself when
it regains priority. So a job keeps only the work pulled off before the outbid."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from ..campaign import Campaign, Job
from ..models import Instance

Tier = Literal["on-demand", "interruptible"]
StopCause = Literal["contract", "outbid", "host"]

# what the policy assumes of a machine and model it knows nothing of: outbids per hour on bid
PRIOR_OUTBID_RATE = 0.3
PRIOR_WEIGHT_H = 2.0  # the prior counts as this many hours on bid, seen
RESUME_H = 0.1  # hours a resume or a move costs before the job computes again (boot, push)
MOVE_BOOT_H = 0.25  # a move's fresh host: its boot and preflight before the job runs there
BID_ROOM = 0.15  # a bid clears bid_floor by at least this share, more where outbids are common
BID_ROOM_PER_RATE = 0.3  # ... plus this share per outbid an hour, up to BID_ROOM_MAX
BID_ROOM_MAX = 0.6
OD_SHARE = 0.9  # a bid never reaches this share of the same machine's on-demand price
WAIT_S = 600.0  # an outbid rental is waited for this long before its job moves
# ... and this long when it holds an exited job's unpulled output: a pause bills storage only,
# giving up runs the finished job again. Rivals hold a machine minutes to hours (Vast gives no
# figure), and a chain of them can outlast half an hour
OUTPUT_WAIT_S = 4 * 3600.0
# the share of outbids that end in a move, before the ledger has seen any (20 refereed runs of
# family 31: 15 of 37 outbids moved, docs/benchmarks.md); the ledger's own share replaces it
MOVE_SHARE = 0.4
MOVE_PRIOR_N = 5.0  # the prior counts as this many outbids seen
REBID_STEP = 0.1  # a rebid clears the new bid_floor by this share
LOWER_SLACK = 0.1  # a running bid comes down only where it is this share over a fresh bid


def eligible(job: Job) -> bool:
    """Only sized, checkpointing jobs may bid: an outbid kills the job, its checkpoint survives."""
    return job.ref_gpu is not None and job.ref_hours is not None and bool(job.checkpoint)


def tier_for(job: Job | None, campaign: Campaign, policy: str) -> Tier:
    """The tier a job may be rented on: `seed`, a campaign whose `rental` says so, and any job not
    sized and checkpointing rent on-demand; `auto` still weighs the price (`worth_bidding`)."""
    if policy == "seed" or campaign.rental == "on-demand" or job is None or not eligible(job):
        return "on-demand"
    return "interruptible"


@dataclass(frozen=True, slots=True)
class Exposure:
    """What the ledger saw of one machine (or model) on the tier: hours held on bid, outbids."""

    hours: float = 0.0
    outbids: int = 0


def outbid_rate(machine: Exposure, model: Exposure) -> float:
    """Outbids per hour on bid to expect: this machine's record, then its model's, then the
    prior, each weighted by the hours behind it (a few hours say little)."""
    hours = PRIOR_WEIGHT_H + model.hours + 2 * machine.hours
    seen = PRIOR_OUTBID_RATE * PRIOR_WEIGHT_H + model.outbids + 2 * machine.outbids
    return seen / hours


def exposure(
    rows: Iterable[tuple[int, str, float, int]], machine_id: int, gpu: str
) -> tuple[Exposure, Exposure]:
    """(machine, model) exposure from ledger rows (machine_id, gpu_name, hours on bid, outbids)."""
    rows = list(rows)
    mine = [(h, n) for mid, _, h, n in rows if mid == machine_id]
    model = [(h, n) for _, g, h, n in rows if g == gpu]
    return (
        Exposure(sum(h for h, _ in mine), sum(n for _, n in mine)),
        Exposure(sum(h for h, _ in model), sum(n for _, n in model)),
    )


def checkpoint_every_s(base_s: float, rate_per_h: float) -> float:
    """How often to pull a job's checkpoint on the tier: the campaign's interval, or a quarter of
    the expected time between outbids where sooner (never under a minute)."""
    if rate_per_h <= 0:
        return base_s
    return max(60.0, min(base_s, 3600.0 / rate_per_h / 4.0))


def bid_top(on_demand: float, cap: float | None) -> float:
    """The most a bid may be: under the machine's on-demand share (`OD_SHARE`) and the cap."""
    return on_demand * OD_SHARE if cap is None else min(cap, on_demand * OD_SHARE)


def bid_for(
    bid_floor: float | None, on_demand: float, rate_per_h: float, cap: float | None
) -> float | None:
    """What to bid on an offer: bid_floor and some room, more where outbids are frequent; never at
    `bid_top`. None: no bid."""
    if bid_floor is None or bid_floor <= 0:
        return None
    room = min(BID_ROOM_MAX, BID_ROOM + BID_ROOM_PER_RATE * rate_per_h)
    top = bid_top(on_demand, cap)
    if bid_floor > top:
        return None
    bid = round(min(bid_floor * (1 + room), top), 4)
    return bid if bid >= bid_floor else None  # a bid_floor under $0.0001/h rounds to a losing bid


def move_share(outbids: int, moves: int) -> float:
    """The share of outbids that end in a move, from the ledger's record (an outbid rental let
    go, or one outbid before it was proven, which is given up), shrunk towards `MOVE_SHARE`."""
    seen = min(max(0, moves), max(0, outbids))
    return (MOVE_SHARE * MOVE_PRIOR_N + seen) / (MOVE_PRIOR_N + max(0, outbids))


def outbid_cost(bid: float, on_demand: float, share: float = MOVE_SHARE) -> float:
    """The USD one outbid costs beside the work it throws away: the restart (`RESUME_H`, at the
    bid), and for the share that moves, a fresh host's boot (`MOVE_BOOT_H`) at on-demand."""
    return RESUME_H * bid + share * MOVE_BOOT_H * on_demand


def lower_bid(
    bid: float,
    raised_from: float,
    bid_floor: float | None,
    on_demand: float,
    rate_per_h: float,
    cap: float | None,
) -> float | None:
    """A raised bid brought back down once its rival has gone, else it bills for the rest of the
    rental: to what a create would bid now, never under the bid it was raised from, and only
    `LOWER_SLACK` under. Never further: following the floor down is outbid when it drifts back
    (family 31: lowered 38 times, 57 outbids against 45). None: keep the bid."""
    fresh = bid_for(bid_floor, on_demand, rate_per_h, cap)
    if fresh is None:
        return None
    to = max(fresh, raised_from)
    return to if to * (1 + LOWER_SLACK) <= bid else None


def tier_cost(
    hours: float,
    bid: float,
    on_demand: float,
    rate_per_h: float,
    ckpt_every_s: float,
    share: float = MOVE_SHARE,
) -> float:
    """The expected USD of `hours` of work on a bid: it runs R = hours / (1 - rate x ckpt / 2)
    hours, and each outbid costs its restart or a move (`outbid_cost`). Infinite where outbids
    come faster than the work between them survives."""
    lost_h = ckpt_every_s / 3600.0 / 2.0
    kept = 1.0 - rate_per_h * lost_h
    if kept <= 0:
        return float("inf")
    running = hours / kept
    return bid * running + rate_per_h * running * outbid_cost(bid, on_demand, share)


def worth_bidding(
    bid: float,
    on_demand: float,
    rate_per_h: float,
    ckpt_every_s: float,
    share: float = MOVE_SHARE,
) -> bool:
    """`auto`: whether a job's expected cost on the tier is under its cost on-demand. Linear in the
    job's hours, so one hour stands for any job."""
    return tier_cost(1.0, bid, on_demand, rate_per_h, ckpt_every_s, share) < on_demand


def stop_cause(inst: Instance, *, bid: float | None, now: float) -> StopCause | None:
    """Why a rental we did not stop reads stopped (None: it does not). The row cannot say (dstack
    reads all three states "stopped" as possibly an outbid): past `end_date` the contract's; a bid
    rental's other stops are outbids; an on-demand one's, the market's."""
    if not inst.market_stopped and inst.known_status != "stopped":
        return None
    if inst.end_date is not None and inst.end_date <= now:
        return "contract"
    if bid is not None:
        return "outbid"
    return "host"


def work_lost_s(outbid_at: float, job_started_at: float, last_pull_at: float | None) -> float:
    """The work an outbid cost a job: the time since its last checkpoint pulled (or its start)."""
    since = job_started_at if last_pull_at is None else max(last_pull_at, job_started_at)
    return max(0.0, outbid_at - since)


# A moved job's newer work, copied off its paused rental (Vast's copy between instances works
# on a stopped one: `engine/jobs/rescue.py`). The copy starts ~30 s after it is asked
# (vast-ai/docs `data-movement.mdx`) and is looked for each job check after that, so less work
# than this is not worth the next host's wait; past RESCUE_WAIT_S the job starts from what
# was pulled.
RESCUE_MIN_S = 180.0
RESCUE_WAIT_S = 600.0
RESCUE_SETTLE_S = 20.0  # the copied folder unchanged this long between two looks: it is in


def rescue_worth(lost_s: float | None, has_checkpoint: bool, source_kept: bool) -> bool:
    """Whether to copy a job's state off the rental an outbid paused onto its next host: it
    checkpoints, the rental still holds its disk, and the work since the last pull is worth more
    than the wait."""
    return has_checkpoint and source_kept and lost_s is not None and lost_s >= RESCUE_MIN_S
