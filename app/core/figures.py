"""The receipt's figures, defined once: what one campaign's hold on one instance (a tenure)
contributes, and how tenures add up.

A rental that never delivered is a dud (its host's fault), stopped by the market before it was
proven, or cancelled; only duds are the hosts' record. The ledger's receipt and the live snapshot
both call `summarize`, so the screen and the receipt cannot drift apart."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .lifecycle import CANCELLED, is_dud


@dataclass(frozen=True)
class Tenure:
    """One campaign's hold on one instance, as the receipt counts it."""

    created: bool  # this campaign created it (False: reused a proven rental of another)
    verified: bool  # passed its preflight (or was trusted on sight) during this tenure
    gone: bool  # given up on, destroyed or lost
    gpu_hours: float  # delivered: from verification to its first halt (see `delivered_hours`)
    total_usd: float  # billed during this tenure, GPU and storage
    lifetime_min: float  # from its start to its end (or now)
    jobs_finished: int = 0
    failure_class: str | None = None
    market_stopped: bool = False  # given up because the market stopped it before it proved

    @property
    def dud(self) -> bool:
        return is_dud(self.verified, self.gone, self.failure_class)

    @property
    def undelivered_apart(self) -> str | None:
        """Why a never-delivered rental is no dud: "market" or "cancelled"; else None."""
        if self.verified or not self.gone or self.failure_class != CANCELLED:
            return None
        return "market" if self.market_stopped else "cancelled"


def delivered_hours(
    verified_at: float | None,
    delivered_until: float | None,
    now: float,
    resumed: Sequence[tuple[float, float | None]] = (),
) -> float:
    """GPU-hours an instance delivered: from its verification to when it first stopped delivering,
    or until now, plus a bid rental's runs after each resume. The ledger's `instances` and
    `tenures` views compute the same in SQL."""
    if verified_at is None:
        return 0.0
    end = now if delivered_until is None else delivered_until
    again = sum(max(0.0, (now if e is None else e) - b) for b, e in resumed)
    return (max(0.0, end - verified_at) + again) / 3600


def summarize(campaign: str, tenures: Iterable[Tenure]) -> dict[str, Any]:
    """A campaign's receipt from its tenures (its figures by name, and `by_class`)."""
    ts = list(tenures)
    duds = [t for t in ts if t.dud]
    gpu_hours = sum(t.gpu_hours for t in ts)
    total = sum(t.total_usd for t in ts)
    created = sum(1 for t in ts if t.created)
    by_class = Counter(t.failure_class or "unclassified" for t in duds)
    return {
        "campaign": campaign,
        "creates": created,
        "reused": len(ts) - created,
        "duds": len(duds),
        "dud_share": len(duds) / len(ts) if ts else 0.0,
        "dud_usd": sum(t.total_usd for t in duds),
        "dud_mean_lifetime_min": (sum(t.lifetime_min for t in duds) / len(duds) if duds else 0.0),
        "stopped_by_market": sum(1 for t in ts if t.undelivered_apart == "market"),
        "cancelled": sum(1 for t in ts if t.undelivered_apart == "cancelled"),
        "verified": sum(1 for t in ts if t.verified),
        "gpu_hours": gpu_hours,
        "jobs_finished": sum(t.jobs_finished for t in ts),
        "total_usd": total,
        "usd_per_gpu_hour": total / gpu_hours if gpu_hours > 0 else None,
        "creates_per_gpu_hour": created / gpu_hours if gpu_hours > 0 else None,
        "by_class": dict(by_class),
    }
