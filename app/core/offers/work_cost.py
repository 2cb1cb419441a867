"""What a host is expected to cost per delivered reference GPU-hour, and whether a slow proven host
is worth keeping against a fresh create. Pure.

An offer delivers with odds `p`, else it is a dud that bills its own price until caught, so a dud
on a dear card costs more (a flat $0.07 a dud let `default` rent A100s that lost 8x seed's dud
money). The odds read our own ledger only (DESIGN rule 6), shrunk from machine to model to the
market's pool."""

from __future__ import annotations

from dataclasses import dataclass

from .reputation import PRIOR_STRENGTH

Record = tuple[float, float, float]  # (delivered, duds, mean dud USD): a machine's, as History

PRIOR_ODDS = 0.4  # p(deliver) before any rental ended (reputation.p_deliver without a score)
# The article's receipt: duds lived 13 minutes on average under the seed's watcher, whose boot
# (45 min) and preflight (30 min) deadlines sum to 75 (docs/benchmarks.md, "Calibration"): most
# duds are caught by a freeze, a fatal line or a failed check long before a deadline.
DUD_DETECT_SHARE = 13 / 75
# how much of a host's working time counts as waiting: the fleet works in parallel, and the
# work is paid for whoever does it; a slow host still holds the campaign's end back
WORK_TIME_WEIGHT = 0.15


def detect_prior_h(boot_deadline_s: float, preflight_deadline_s: float) -> float:
    """Hours a dud is expected to bill before the policy's rules give up on it, before the
    ledger has seen one: a share of its boot and preflight deadlines."""
    return DUD_DETECT_SHARE * max(0.0, boot_deadline_s + preflight_deadline_s) / 3600


def detect_h(prior_h: float, dud_minutes: float, duds: float) -> float:
    """A dud's expected life in hours: the ledger's mean, shrunk towards `prior_h`."""
    n = max(0, duds)
    return (prior_h * PRIOR_STRENGTH + max(0.0, dud_minutes) / 60) / (PRIOR_STRENGTH + n)


def shrunk(prior: float, good: float, bad: float, strength: float = PRIOR_STRENGTH) -> float:
    return (prior * strength + good) / (strength + good + bad)


def deliver_odds(
    machine: Record | None,
    model: tuple[float, float] | None,
    pool: float | None,
    strength: float = PRIOR_STRENGTH,
) -> float:
    """p(deliver) of an offer: its machine's record over its model's, over the market's."""
    model_good, model_bad = model or (0.0, 0.0)
    model_p = shrunk(PRIOR_ODDS if pool is None else pool, model_good, model_bad, strength)
    good, bad, _ = machine or (0, 0, 0.0)
    return shrunk(model_p, good, bad)


@dataclass(frozen=True)
class HostCost:
    """One host's expected cost of `work_ref_h` reference GPU-hours."""

    usd: float  # what it bills: the work, its boot and preflight, the duds before it
    wait_h: float  # the hours the campaign is expected to wait on it (weighted)
    work_ref_h: float
    lead_h: float = 0.0  # of `wait_h`, its boot and the duds before it: the wait before it works

    def per_ref_h(self, value_of_time: float, covered: bool = False) -> float:
        """USD per delivered reference GPU-hour, its wait priced at `value_of_time`. `covered`:
        a proven host works on meanwhile (an overlapping swap), so its boot and duds bill but
        hold nothing back."""
        wait = self.wait_h - self.lead_h if covered else self.wait_h
        return (self.usd + value_of_time * wait) / max(self.work_ref_h, 1e-9)


def host_cost(
    dph: float, rate: float, p: float, dud_h: float, work_ref_h: float, boot_h: float
) -> HostCost:
    """The expected cost of `work_ref_h` on an offer at `dph` delivering `rate` with odds `p`: its
    boot and working hours plus (1 - p) / p duds of `dud_h` hours. A proven host: `p = 1`,
    `boot_h = 0`."""
    p = min(1.0, max(p, 1e-3))
    host_h = work_ref_h / max(rate, 1e-6)
    duds = (1 - p) / p
    usd = max(0.0, dph) * (host_h + boot_h + duds * dud_h)
    lead_h = boot_h + duds * dud_h
    return HostCost(usd, host_h * WORK_TIME_WEIGHT + lead_h, work_ref_h, lead_h)
