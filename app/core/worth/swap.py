"""Is a slow proven host worth keeping against a fresh create? Pure.

A proven host bills only the work left; a create bills its boot and the duds before one delivers.
A host is stopped (never destroyed, never with a job running) only once its cost has stayed
`SLOW_ENTER` times a fresh create's (until back under `SLOW_LEAVE`) for `SLOW_DWELL_S`, so it
does not flap; the engine keeps that clock (`slow_since`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..decisions import AttemptView, Stop
from ..delivery import WorkOutlook
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
    fit: Sequence[Offer], history: History, work: WorkOutlook, value_of_time: float
) -> tuple[float, str] | None:
    """The best fit offer's expected USD per delivered reference GPU-hour, boot and duds in
    (`offer_choice.work_scores`), and its sentence; None without a fit offer."""
    scored = work_scores(fit, history, work, value_of_time)
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


def swap_out(a: AttemptView, slow: Slow | None, work_left: bool, now: float) -> Stop | None:
    """Stop a proven host that has been slow against a fresh create for long enough, while no
    job runs on it and work is still queued for a replacement to take (None: keep it)."""
    if not a.passed_preflight or a.busy or not work_left or not swap_due(slow, now):
        return None
    assert slow is not None
    return Stop(a.instance_id, "rule:swap", slow.why)
