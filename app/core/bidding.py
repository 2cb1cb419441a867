"""The interruptible tier's decisions, pure: which jobs may go on it, what to bid, why a rental
stopped, what to do on an outbid, and how often to pull a checkpoint.

Vast's rules (vast-ai/docs `guides/instances/choosing/instance-types.mdx`, `guides/reference/
faq/rental-types.mdx`): on-demand always has priority, the higher bid wins, an outbid instance
is stopped with its running processes killed and its data kept, and it resumes by itself when
it regains priority, billing again from then. An explicit stop does not resume by itself. So a
job on the tier keeps only the work pulled off the box before the outbid, and a resumed rental
that nobody needs bills until someone stops it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .campaign import Campaign, Job
from .models import Instance

Tier = Literal["on-demand", "interruptible"]
StopCause = Literal["us", "contract", "outbid", "host"]

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
# ... and this long when what it holds is an exited job's output, not yet pulled: a pause bills
# storage only, while giving up runs the finished job again, all of it, and makes two ends of
# one job. Rivals hold a machine minutes to hours (the simulator's 10-120 min, its families' up
# to 240; Vast gives no figure), and a chain of them outlasted the half hour this once was (a
# campaign test that failed one CI run in many: the job ran twice to the end)
OUTPUT_WAIT_S = 4 * 3600.0
# the share of outbids that end in a move to a fresh host, before the ledger has seen any; the
# others are rebid (or wait) and resume on the same machine within minutes. Measured on 20
# refereed runs of family 31 at 53ce6b8: of 37 outbids of proven rentals, 22 were rebid and
# resumed within 4 min and 15 waited their 10 min and moved (docs/benchmarks.md, "four bugs
# found in the runs"). Where rivals rent on-demand no rebid wins, and nearly every outbid is a
# move (held-out 9001:8), so the ledger's own share replaces it as outbids are seen
MOVE_SHARE = 0.4
MOVE_PRIOR_N = 5.0  # the prior counts as this many outbids seen
REBID_STEP = 0.1  # a rebid clears the new bid_floor by this share
LOWER_SLACK = 0.1  # a running bid comes down only where it is this share over a fresh bid


def eligible(job: Job) -> bool:
    """Only sized jobs that checkpoint may go on the tier: an outbid kills the process, and what
    survives is the checkpoint pulled before it."""
    return job.ref_gpu is not None and job.ref_hours is not None and bool(job.checkpoint)


def tier_for(job: Job | None, campaign: Campaign, policy: str) -> Tier:
    """The tier a job may be rented on, before prices: `seed` always rents on-demand (the
    article's pipeline), as does a campaign whose `rental` says so, and any job that is not
    sized and checkpointing. `auto` still weighs the price per offer (`worth_bidding`)."""
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
    """(machine, model) exposure from ledger rows (machine_id, gpu_name, hours on bid,
    outbids)."""
    rows = list(rows)
    mine = [(h, n) for mid, _, h, n in rows if mid == machine_id]
    model = [(h, n) for _, g, h, n in rows if g == gpu]
    return (
        Exposure(sum(h for h, _ in mine), sum(n for _, n in mine)),
        Exposure(sum(h for h, _ in model), sum(n for _, n in model)),
    )


def checkpoint_every_s(base_s: float, rate_per_h: float) -> float:
    """How often to pull a job's checkpoint on the tier: at least as often as the campaign says,
    and a quarter of the expected time between outbids where that is sooner (never under a
    minute: a pull costs bandwidth and time)."""
    if rate_per_h <= 0:
        return base_s
    return max(60.0, min(base_s, 3600.0 / rate_per_h / 4.0))


def bid_for(
    bid_floor: float | None, on_demand: float, rate_per_h: float, cap: float | None
) -> float | None:
    """What to bid on an offer: bid_floor and some room, more where this machine and model are
    outbid often; never at or over the same machine's on-demand price share (`OD_SHARE`), nor
    the campaign's cap. None: no bid is worth placing (no bid_floor, or none under the caps)."""
    if bid_floor is None or bid_floor <= 0:
        return None
    room = min(BID_ROOM_MAX, BID_ROOM + BID_ROOM_PER_RATE * rate_per_h)
    top = on_demand * OD_SHARE
    if cap is not None:
        top = min(top, cap)
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
    """The USD one outbid costs beside the work it throws away: the job's restart from its
    checkpoint (`RESUME_H`, at the bid: a rebid resumes the same machine), and for the share
    that moves (`move_share`), a fresh host's boot and preflight (`MOVE_BOOT_H`) priced at
    on-demand, the worst of where the job goes. The wait for a resume bills storage only."""
    return RESUME_H * bid + share * MOVE_BOOT_H * on_demand


def lower_bid(
    bid: float,
    raised_from: float,
    bid_floor: float | None,
    on_demand: float,
    rate_per_h: float,
    cap: float | None,
) -> float | None:
    """A raised bid brought back down once the rival it was raised over has gone: a rebid
    lifts a bid over a rival's, the rival leaves after minutes to hours (`OUTPUT_WAIT_S`), and
    the raised bid would bill for the rest of the rental. It comes down to what a create would
    bid now (`bid_for`), never under the bid it was raised from, and only where that is
    `LOWER_SLACK` under it. Never further: a bid that follows the floor's drift down is
    outbid when the floor drifts back (family 31: lowered 38 times in 10 runs, 57 outbids
    against 45, and a dearer bill). Vast changes a running rental's bid with
    `PUT /api/v0/instances/bid_price/{id}/` (the CLI's `change bid`); an instance row's
    `bid_floor` is the price to beat for it now. None: keep the bid."""
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
    """The expected USD of `hours` of a job's work on a bid: it runs R hours, the work plus what
    each outbid (rate x R of them) throws away, half a checkpoint interval on average, so
    R = hours / (1 - rate x ckpt / 2); each outbid also costs its restart, or a move
    (`outbid_cost`). Infinite where outbids come faster than the work between them survives."""
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
    """`auto`: whether a job's expected cost on the tier (`tier_cost`) is under its cost
    on-demand; otherwise the job falls back to on-demand. Linear in the job's hours, so one
    hour stands for any job."""
    return tier_cost(1.0, bid, on_demand, rate_per_h, ckpt_every_s, share) < on_demand


def stop_cause(
    inst: Instance, *, bid: float | None, we_stopped: bool, now: float
) -> StopCause | None:
    """Why a rental reads stopped (None: it does not). The row alone cannot say: dstack
    (`vastai/compute.py` update_provisioning_data) reads the intended, current and next state
    all "stopped" as "among other cases, when a spot instance is outbid", and the
    create's answer does not say the tier (vast-cli PR #403). So: a stop we asked for is ours;
    past the contract's `end_date` it is the contract's; a bid rental's other stops are outbids
    (its `bid_floor` above our bid confirms it); an on-demand rental's, the host's or the
    market's."""
    if not inst.market_stopped and inst.known_status != "stopped":
        return None
    if we_stopped:
        return "us"
    if inst.end_date is not None and inst.end_date <= now:
        return "contract"
    if bid is not None:
        return "outbid"
    return "host"


Act = Literal["rebid", "wait", "move", "hold"]


@dataclass(frozen=True, slots=True)
class OutbidMove:
    act: Act
    price: float | None  # the new bid for "rebid"
    reason: str


def on_outbid(
    *,
    bid: float,
    bid_floor: float | None,
    on_demand: float,
    cap: float | None,
    paused_s: float,
    verified: bool,
    has_job: bool,
    rebids: int,
    output_only: bool = False,
) -> OutbidMove:
    """What to do with a bid rental that reads outbid:
    - raise the bid over the new bid_floor where that stays under the caps (twice at most: a
      machine fought over twice is better left);
    - else wait for the resume a while (`WAIT_S`; `OUTPUT_WAIT_S` where all it holds is an
      exited job's output, `output_only`): a resume keeps its disk, image and data;
    - then move its job from its last checkpoint to another host. A verified rental stays
      stopped for the operator (automation never destroys one); an unverified one is given up.
    A rental with no job waits (`hold`) only while nothing else needs deciding."""
    top = on_demand * OD_SHARE if cap is None else min(cap, on_demand * OD_SHARE)
    if bid_floor is not None and rebids < 2 and bid_floor > bid:
        price = round(min(bid_floor * (1 + REBID_STEP), top), 4)
        if price >= bid_floor and price > bid:
            return OutbidMove(
                "rebid", price, f"bid_floor ${bid_floor:.4f}/h over our ${bid:.4f}/h: rebid"
            )
    if paused_s < (OUTPUT_WAIT_S if output_only else WAIT_S):
        held = ", an exited job's output on its disk" if output_only else ""
        return OutbidMove("wait", None, f"outbid {paused_s / 60:.1f} min{held}: waiting to resume")
    if not has_job:
        return OutbidMove("hold", None, "outbid with no job: left stopped, not resumed for us")
    why = "no rebid under the cap" if bid_floor is None or bid_floor > top else "rebids spent"
    keep = " (verified: stays stopped for the operator)" if verified else ""
    return OutbidMove(
        "move", None, f"outbid {paused_s / 60:.1f} min, {why}: job moves from its checkpoint{keep}"
    )


def stop_unneeded_resume(*, resumed: bool, has_job: bool, wanted: bool) -> bool:
    """A rental that resumed by itself bills again: stop it explicitly (an explicit stop does
    not resume by itself) unless a job runs or is wanted on it. A resume nobody catches leaks."""
    return resumed and not has_job and not wanted


def work_lost_s(outbid_at: float, job_started_at: float, last_pull_at: float | None) -> float:
    """The work an outbid cost a job: the time since the last checkpoint that came off the box
    (or since the job started, when none did)."""
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
    """Whether to copy a job's state off the rental an outbid paused, onto its next host: it
    checkpoints, the rental still holds its disk (ours, not destroyed, not the next host
    itself), and the work since the last pull is worth more than the wait."""
    return has_checkpoint and source_kept and lost_s is not None and lost_s >= RESCUE_MIN_S
