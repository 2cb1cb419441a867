"""Is a slow proven host worth keeping against a fresh create? Pure.

A proven host bills only the work left (no boot, no dud risk); a fresh create bills its boot
and preflight hours and the duds expected before one delivers (`offers.work_cost.host_cost`). So a
host is kept unless its expected USD per delivered reference GPU-hour, for the work a host
still has to take on, is much worse than the best fit offer's. Then it is *stopped*, never
destroyed (a verified host is never destroyed by automation), and only while no job runs on
it: work in flight is never thrown away.

The swap overlaps: a host due for a swap is rented a replacement while it works on (`leaving`:
the fleet counts it as gone), it takes jobs until enough hosts not due are in service
(`replaced`), then it finishes the job it runs and is stopped. So the work waits on neither the
replacement's boot nor its duds, and the fresh create is priced so (`covered`): its boot and
duds bill, its wait does not count.

Hysteresis, so that it does not flap on one noisy reading or one offer that comes and goes: a
host becomes slow when its cost is `SLOW_ENTER` times a fresh create's or more, stays slow
until it is back under `SLOW_LEAVE` times, and is stopped only once it has been slow for
`SLOW_DWELL_S` market seconds. The engine keeps the clock (`slow_since`, fed each look with
the latest ratio, as `rules.low_util_since` keeps the idle clock); the rule reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..decisions import AttemptView, Stop
from ..delivery import WorkOutlook
from ..lifecycle import Phase
from ..models import Offer
from ..offers.choice import History, work_scores
from ..offers.work_cost import host_cost

SLOW_ENTER = 1.5  # its cost per delivered unit over a fresh create's: slow from here
SLOW_LEAVE = 1.2  # and no longer slow once back under this
SLOW_DWELL_S = 600.0  # slow for this long before it is stopped (market seconds)


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
    """Slow long enough to be stopped once its job is done (the dispatch gives it no more)."""
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
    if not a.passed_preflight or a.busy or not work_left or not swap_due(slow, now):
        return None
    if not covered:
        return None
    assert slow is not None
    return Stop(a.instance_id, "rule:swap", slow.why)
