"""Is a slow proven host worth keeping against a fresh create, and should a running job move to a
cheaper free proven host (`moves_off`)? Pure.

A proven host bills only the work left (no boot, no dud risk); a fresh create bills its boot and
preflight hours and the duds expected before one delivers (`offers.work_cost.host_cost`). So a
host is kept unless its expected USD per delivered reference GPU-hour, for the work a host still
has to take on, is much worse than the best fit offer's. Then it is *stopped*, never destroyed,
and only once free: the swap overlaps (`leaving`, `replaced`, `swap_out`), so the work waits on
neither the replacement's boot nor its duds, and the fresh create is priced so (`covered`). The
hysteresis (`SLOW_ENTER`, `SLOW_LEAVE`, `SLOW_DWELL_S`) keeps one noisy reading or one offer
that comes and goes from flapping it; the engine keeps the slow clock (`next_slow`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..bidding.tier import RESUME_H
from ..decisions import AttemptView, Stop
from ..delivery import WorkOutlook
from ..lifecycle import Phase
from ..models import Offer
from ..offers.choice import History, work_scores
from ..offers.work_cost import host_cost

SLOW_ENTER = 1.5  # its cost per delivered unit over a fresh create's: slow from here
SLOW_LEAVE = 1.2  # and no longer slow once back under this
SLOW_DWELL_S = 600.0  # slow for this long before it is stopped (market seconds)
MOVE_ENTER = 1.5  # a running job's cost left on its host over its cost moved: moved from here
MOVE_MIN_USD = 0.02  # ... and only where the move saves at least this much
MOVE_RULE = "rule:move_off"


@dataclass(frozen=True)
class Slow:
    """A proven host found slow: since when, and the sentence its stop will carry."""

    since: float
    why: str


def keep_usd_per_ref_h(dph: float, rate: float, work_ref_h: float, value_of_time: float) -> float:
    """What a proven host delivering `rate` reference GPU-hours an hour at `dph` is expected
    to cost per reference GPU-hour of `work_ref_h` more work: no boot, no duds."""
    return host_cost(dph, rate, 1.0, 0.0, work_ref_h, 0.0).per_ref_h(value_of_time)


def fresh_usd_per_ref_h(
    fit: Sequence[Offer],
    history: History,
    work: WorkOutlook,
    value_of_time: float,
    covered: bool = False,
) -> tuple[float, str] | None:
    """The best fit offer's expected USD per delivered reference GPU-hour, boot and duds in
    (`offer_choice.work_scores`), and its sentence; None without a fit offer. `covered`: a
    proven host works on while it boots (an overlapping swap)."""
    scored = work_scores(fit, history, work, value_of_time, covered)
    return (scored[0][0], scored[0][2]) if scored else None


def next_slow(prev: Slow | None, ratio: float | None, now: float, why: str) -> Slow | None:
    """The slow clock after one more look: `ratio` is the host's cost per unit over a fresh
    create's (None: nothing to compare with now, the clock stands as it was)."""
    if ratio is None:
        return prev
    if ratio >= SLOW_ENTER:
        return prev if prev is not None else Slow(now, why)
    if ratio < SLOW_LEAVE:
        return None
    return prev  # between the two: as it was


def swap_due(slow: Slow | None, now: float) -> bool:
    """Slow long enough to be swapped: its replacement is rented (`leaving`), and once that is
    in service it takes no more jobs and is stopped when free (`replaced`, `swap_out`)."""
    return slow is not None and now - slow.since >= SLOW_DWELL_S


def leaving(attempts: Sequence[AttemptView], slow: Mapping[int, Slow], now: float) -> set[int]:
    """The proven hosts in service whose swap is due: the fleet rents their replacements."""
    return {
        a.instance_id
        for a in attempts
        if a.phase == Phase.VERIFIED
        and a.passed_preflight
        and swap_due(slow.get(a.instance_id), now)
    }


def replaced(in_service: Sequence[int], going: set[int], want: int) -> bool:
    """Enough proven hosts in service that are not leaving (`want`, the hosts the work wants
    at once) for the leaving ones to take no more jobs."""
    return sum(1 for i in in_service if i not in going) >= max(1, want)


def swap_out(
    a: AttemptView, slow: Slow | None, work_left: bool, now: float, covered: bool = True
) -> Stop | None:
    """Stop a proven host that has been slow against a fresh create for long enough, while no
    job runs on it, work is still queued and its replacement is in service (`covered`,
    `replaced`); until then it takes jobs (None: keep it)."""
    if not a.passed_preflight or a.busy or not work_left or not covered or not swap_due(slow, now):
        return None
    assert slow is not None
    return Stop(a.instance_id, "rule:swap", slow.why)


@dataclass(frozen=True)
class Busy:
    """A proven host with a job running on it, as a move reads it."""

    instance_id: int
    usd_per_ref_h: float  # its price per reference GPU-hour for the job's work left
    left_ref_h: float  # the job's work left
    lost_ref_h: float  # its work since the last checkpoint came off: a move does it again


@dataclass(frozen=True)
class Free:
    """A proven host with no job, nothing queued for it."""

    instance_id: int
    usd_per_ref_h: float
    dph: float


def moves_off(busy: Sequence[Busy], free: Sequence[Free]) -> dict[int, str]:
    """The running jobs to move onto free proven hosts, by their hosts (instance id -> why):
    where the job's work left costs `MOVE_ENTER` times or more on its own host than moved (the
    work left and the work lost, and a restart, at the free host's price), and at least
    `MOVE_MIN_USD` more; the largest savings first, each free host taking one job."""
    found = []
    for b in busy:
        keep = b.usd_per_ref_h * b.left_ref_h
        for f in free:
            move = f.usd_per_ref_h * (b.left_ref_h + b.lost_ref_h) + f.dph * RESUME_H
            if keep >= MOVE_ENTER * move and keep - move >= MOVE_MIN_USD:
                found.append((keep - move, b, f, keep, move))
    found.sort(key=lambda t: (-t[0], t[1].instance_id, t[2].instance_id))
    out: dict[int, str] = {}
    taken: set[int] = set()
    for _, b, f, keep, move in found:
        if b.instance_id in out or f.instance_id in taken:
            continue
        taken.add(f.instance_id)
        out[b.instance_id] = (
            f"its job's {b.left_ref_h:.2f} ref-h left cost ${keep:.3f} here, ${move:.3f} on "
            f"free i:{f.instance_id} ({b.lost_ref_h:.2f} ref-h since its checkpoint done again)"
        )
    return out


def move_off(a: AttemptView, moving: Mapping[int, str]) -> Stop | None:
    """Stop a proven host whose running job moves to a free proven host (`moves_off`)."""
    why = moving.get(a.instance_id)
    if why is None or not a.passed_preflight or not a.busy:
        return None
    return Stop(a.instance_id, MOVE_RULE, why)
