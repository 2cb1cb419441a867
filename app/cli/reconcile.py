"""`rentwatch reconcile`: fetch the market's bill and the ledger's charges, compare them
(app/ledger/reconcile.py), print every difference over a cent. Exit 0 with none, 1 otherwise."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from ..ledger.job_reads import literal
from ..ledger.reconcile import TOLERANCE_USD, MarketCharge, market_by_instance, reconcile
from ..market.errors import REFUSALS
from ..market.factory import find_api_key, market_at
from ..market.reach import market_failure
from .flags import add_market_flag
from .ledger_pick import select

DAY = 86400.0


async def fetch_market(
    url: str, key: str, since: float, timeout: float | None = None
) -> dict[int, MarketCharge]:
    try:
        async with market_at(url, key, timeout=timeout) as market:
            if not market.caps.charges:
                raise SystemExit(f"the market at {url} serves no bill to reconcile with")
            rows = await market.charges(since, market.now() + DAY)
    except REFUSALS as exc:
        raise market_failure(url, exc) from None
    return market_by_instance(rows)


def ledger_rows(path: str, campaign: str | None) -> list[dict[str, Any]]:
    """The ledger's per-instance charges (its `instances` view)."""
    where = f" WHERE campaign = {literal(campaign)}" if campaign else ""
    return select(path, f"SELECT * FROM instances{where} ORDER BY instance_id", 1 << 40)


def run(args: argparse.Namespace) -> int:
    from .ledger_pick import ledger_for

    if args.team:  # every operator's hash chain in the team store
        from .team import cmd_reconcile_team

        return cmd_reconcile_team(args)
    # without --ledger: the user's ledger that knows the campaign, as `receipt` picks it
    rows = ledger_rows(str(ledger_for(args.ledger, campaign=args.campaign)), args.campaign)
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
    p = sub.add_parser("reconcile", help="the ledger's charges against the market's own bill")
    p.add_argument("--ledger", help="ledger file (default: in the user's data dir)")
    p.add_argument("--campaign", help="one campaign only")
    add_market_flag(p, api_key=True)
    p.add_argument("--http-timeout", type=float, default=None, help="seconds per market call")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    from .team import add_team_flags

    add_team_flags(p, reader=True)
    p.set_defaults(fn=run)
