"""`rentwatch reconcile`: the ledger's charges against the market's own bill, per instance.

The market's bill is what `vastai show invoices-v1 --charges` reads (`GET /api/v0/charges/`:
one row per instance and day, `source` "instance-ID", `amount` in USD, sub-items per kind).
The ledger's charges are its `instances` view (billing marks priced by the same rules). Every
instance whose two figures differ by more than a cent is named, with the likely cause, so an
operator can prove "every cent" against the invoice. Exit 0 with no difference, 1 otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from .client import VastClient, find_api_key

TOLERANCE_USD = 0.01
REAL_MARKET = "https://console.vast.ai"
DAY = 86400.0


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
        return {
            "ledger_usd": round(self.ledger_usd, 6),
            "market_usd": round(self.market_usd, 6),
            "instances": self.instances,
            "tolerance_usd": TOLERANCE_USD,
            "differences": [
                {
                    **asdict(d),
                    "ledger_usd": round(d.ledger_usd, 6),
                    "market_usd": round(d.market_usd, 6),
                }
                for d in self.differences
            ],
        }


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
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip().lstrip("$"))
        except ValueError:
            return 0.0
    return 0.0


def market_by_instance(rows: Iterable[dict[str, Any]]) -> dict[int, MarketCharge]:
    """Sum the market's charge rows per instance (rows for volumes or serverless are skipped)."""
    usd: dict[int, float] = {}
    kinds: dict[int, dict[str, float]] = {}
    for row in rows:
        if str(row.get("type", "instance")).lower() != "instance":
            continue
        iid = _instance_id(row)
        if iid is None:
            continue
        usd[iid] = usd.get(iid, 0.0) + _amount(row.get("amount"))
        for item in row.get("items") or []:
            if isinstance(item, dict):
                k = str(item.get("type", "other")).lower()
                kinds.setdefault(iid, {})[k] = kinds.get(iid, {}).get(k, 0.0) + _amount(
                    item.get("amount")
                )
    return {iid: MarketCharge(v, kinds.get(iid, {})) for iid, v in usd.items()}


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
    if not ledger_row.get("destroyed_at") and gap < 0:
        return "still held on the market: it keeps billing after the ledger's last event"
    gpu = market.by_kind.get("gpu")
    storage = market.by_kind.get("storage")
    bandwidth = market.by_kind.get("bandwidth", 0.0)
    parts = []
    if gpu is not None:
        parts.append(("GPU time", float(ledger_row.get("gpu_usd") or 0.0) - gpu))
    if storage is not None:
        parts.append(("storage", float(ledger_row.get("storage_usd") or 0.0) - storage))
    if bandwidth > TOLERANCE_USD / 2:
        parts.append(("bandwidth", -bandwidth))
    if not parts:
        return "the totals differ (the market gave no breakdown)"
    what, diff = max(parts, key=lambda p: abs(p[1]))
    if what == "GPU time":
        return (
            "GPU time differs: a billing rule the ledger did not apply (GPU from the create vs "
            "only while running), a price the ledger recorded wrong, or a running/stop time "
            f"recorded late (ledger {'over' if diff > 0 else 'under'} by ${abs(diff):.4f})"
        )
    if what == "storage":
        return (
            "storage differs: time offline (the market bills no storage then), a destroy "
            f"recorded late, or a wrong disk price (ledger {'over' if diff > 0 else 'under'} "
            f"by ${abs(diff):.4f})"
        )
    return f"bandwidth the ledger does not model (${bandwidth:.4f} of transfers)"


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


async def fetch_market(
    url: str, key: str, since: float, timeout: float | None = None
) -> dict[int, MarketCharge]:
    async with VastClient(url, key, timeout=timeout) as client:
        await client.sync_clock()
        rows = await client.charges(since, client.now() + DAY)
    return market_by_instance(rows)


def ledger_rows(path: str, campaign: str | None) -> list[dict[str, Any]]:
    """The ledger's per-instance charges: through the controller that holds the file for
    writing when one runs (DuckDB lets no other process open it then), else from the file."""
    from .ledger import Ledger
    from .service.commands import controller_for_ledger

    remote = controller_for_ledger(path)
    if remote is None:
        with Ledger(path, read_only=True) as ledger:
            return ledger.instance_rows(campaign)
    where = " WHERE campaign = '{}'".format(campaign.replace("'", "''")) if campaign else ""
    try:  # the same view, read through the controller's read-only query sandbox
        got = remote.query_all(f"SELECT * FROM instances{where} ORDER BY instance_id", 1 << 40)
    finally:
        remote.close()
    return [dict(zip(got.columns, row, strict=True)) for row in got.rows]


def run(args: argparse.Namespace) -> int:
    from .ledger.store import default_ledger_path

    rows = ledger_rows(str(args.ledger or default_ledger_path()), args.campaign)
    if args.campaign and not rows:
        print(f"rentwatch: no campaign {args.campaign!r} in the ledger", file=sys.stderr)
        return 2
    since = min((float(r["created_at"]) for r in rows), default=0.0) - DAY
    key = find_api_key(getattr(args, "api_key", None))
    market = asyncio.run(
        fetch_market(args.market_url, key, since, getattr(args, "http_timeout", None))
    )
    if args.campaign:  # the market's rows of other campaigns are not this ledger's question
        ours = {int(r["instance_id"]) for r in rows}
        market = {iid: c for iid, c in market.items() if iid in ours}
    result = reconcile(rows, market)
    if args.json:
        print(json.dumps(result.as_json(), indent=2))
    else:
        print(
            f"ledger ${result.ledger_usd:.4f}  market ${result.market_usd:.4f}  "
            f"over {result.instances} instances: {len(result.differences)} difference(s) "
            f"over ${TOLERANCE_USD:.2f}"
        )
        for d in result.differences:
            print(
                f"  i:{d.instance_id}  ledger ${d.ledger_usd:.4f}  market ${d.market_usd:.4f}  "
                f"{d.cause}"
            )
    return 1 if result.differences else 0


def add_parser(sub: Any) -> None:
    """Register `rentwatch reconcile` on the CLI's subparsers."""
    p = sub.add_parser("reconcile", help="the ledger's charges against the market's own bill")
    p.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    p.add_argument("--campaign", help="one campaign only")
    p.add_argument("--market-url", default=REAL_MARKET, help=f"default {REAL_MARKET}")
    p.add_argument("--api-key", help="prefer VAST_API_KEY (this flag shows in the process list)")
    p.add_argument("--http-timeout", type=float, default=None, help="seconds per market call")
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=run)
