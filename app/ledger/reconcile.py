"""The ledger's charges against the market's own bill, per instance (`rentwatch reconcile`).

The market's bill is `GET /api/v0/charges/` (what `vastai show invoices-v1 --charges` reads:
vast-ai/docs `openapi.yaml` showCharges), items `gpu`, `disk`, `bwd`, `bwu`; the ledger's is its
`instances` view. Every instance whose figures differ by more than a cent is named with the
likely cause. Exit 0 with no difference, 1 otherwise."""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

TOLERANCE_USD = 0.01


@dataclass(frozen=True)
class MarketCharge:
    """One instance's bill on the market, split by kind where the market splits it."""

    usd: float
    by_kind: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Difference:
    instance_id: int
    ledger_usd: float
    market_usd: float
    cause: str


@dataclass(frozen=True)
class Reconciliation:
    ledger_usd: float
    market_usd: float
    differences: list[Difference]
    instances: int

    def as_json(self) -> dict[str, Any]:
        def rounded(d: dict[str, Any]) -> dict[str, Any]:
            return d | {k: round(d[k], 6) for k in ("ledger_usd", "market_usd")}

        doc = rounded(asdict(self)) | {"tolerance_usd": TOLERANCE_USD}
        return doc | {"differences": [rounded(d) for d in doc["differences"]]}


def _instance_id(row: dict[str, Any]) -> int | None:
    meta = row.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("instance_id"), int):
        return int(meta["instance_id"])
    source = row.get("source")
    if isinstance(source, str) and "-" in source:
        tail = source.rsplit("-", 1)[1].strip()
        if tail.isdigit():
            return int(tail)
    return None


def _amount(value: Any) -> float:
    """A charge's amount: a number, or its text ("$1.25"); anything else is 0."""
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        with contextlib.suppress(ValueError):
            return float(str(value).strip().lstrip("$"))
    return 0.0


def market_by_instance(rows: Iterable[dict[str, Any]]) -> dict[int, MarketCharge]:
    """Sum the market's charge rows per instance (rows for volumes or serverless are skipped)."""
    usd: dict[int, float] = {}
    kinds: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        iid = _instance_id(row)
        if str(row.get("type", "instance")).lower() != "instance" or iid is None:
            continue
        usd[iid] = usd.get(iid, 0.0) + _amount(row.get("amount"))
        for item in row.get("items") or []:
            if isinstance(item, dict):
                kinds[iid][str(item.get("type", "other")).lower()] += _amount(item.get("amount"))
    return {iid: MarketCharge(v, dict(kinds.get(iid, {}))) for iid, v in usd.items()}


def likely_cause(ledger_row: dict[str, Any] | None, market: MarketCharge | None) -> str:
    """A sentence naming the most likely reason two figures differ."""
    if ledger_row is None:
        return "a rental the ledger never recorded (a create it did not see, or another tool's)"
    if market is None:
        return "the ledger bills a rental the market does not (its create never took effect)"
    ledger_usd = float(ledger_row.get("total_usd") or 0.0)
    gap = ledger_usd - market.usd
    if ledger_row.get("written_off") and gap < 0:
        return (
            "written off (the market said it was gone, or never answered for it), yet the "
            "market bills it on: a rental nobody watches"
        )
    if ledger_row.get("returns"):
        return (
            "written off, then listed again: what it did while unseen (a state change in the "
            f"gap) was not seen (ledger {'over' if gap > 0 else 'under'} by ${abs(gap):.4f})"
        )
    if ledger_row.get("unread_spells") and gap > 0:
        return (
            "its row was unreadable for a while: the ledger billed it its worst case then "
            f"(running, online), an upper bound (ledger over by ${gap:.4f})"
        )
    if not ledger_row.get("destroyed_at") and gap < 0:
        return "still held on the market: it keeps billing after the ledger's last event"
    return item_cause(ledger_row, market)


# the market's disk item kinds (showCharges: gpu, disk, bwd, bwu; older answers: storage, bandwidth)
DISK_KINDS = ("disk", "storage")


def item_cause(ledger_row: dict[str, Any], market: MarketCharge) -> str:
    """The item (GPU time, disk, bandwidth in or out) whose gap to the ledger is the largest,
    and what usually makes it."""
    by = market.by_kind
    if not by:
        return "the totals differ (the market gave no breakdown)"
    disk = sum(by.get(k, 0.0) for k in DISK_KINDS)
    into = by.get("bwd", 0.0)
    out = by.get("bwu", 0.0) + by.get("bandwidth", 0.0)
    parts = [
        ("gpu", float(ledger_row.get("gpu_usd") or 0.0) - by.get("gpu", 0.0)),
        ("disk", float(ledger_row.get("storage_usd") or 0.0) - disk),
        ("bwd", -into),  # the ledger does not model bandwidth: all of it is a gap
        ("bwu", -out),
    ]
    what, diff = max(parts, key=lambda p: abs(p[1]))
    side = f"ledger {'over' if diff > 0 else 'under'} by ${abs(diff):.4f}"
    if what == "gpu":
        return (
            "gpu: GPU time differs: a billing rule the ledger did not apply (GPU from the create "
            "vs only while running), a price the ledger recorded wrong, or a running/stop time "
            f"recorded late ({side})"
        )
    if what == "disk":
        return (
            "disk: storage differs: time offline (the market bills no storage then), a destroy "
            f"recorded late, or a wrong disk price ({side})"
        )
    return (
        f"{what}: bandwidth the ledger does not model (${into:.4f} into the instance, "
        f"${out:.4f} out of it)"
    )


def reconcile(ledger_rows: list[dict[str, Any]], market: dict[int, MarketCharge]) -> Reconciliation:
    """Compare per instance; the market's rows for instances outside the ledger's campaign
    count only when the ledger holds no campaign filter (`ledger_rows` is every instance)."""
    by_id = {int(r["instance_id"]): r for r in ledger_rows if r.get("instance_id") is not None}
    ids = sorted(set(by_id) | set(market))
    diffs = []
    ledger_total = market_total = 0.0
    for iid in ids:
        row = by_id.get(iid)
        charge = market.get(iid)
        lu = float(row.get("total_usd") or 0.0) if row else 0.0
        mu = charge.usd if charge else 0.0
        ledger_total += lu
        market_total += mu
        if abs(lu - mu) > TOLERANCE_USD:
            diffs.append(Difference(iid, lu, mu, likely_cause(row, charge)))
    return Reconciliation(ledger_total, market_total, diffs, len(ids))
