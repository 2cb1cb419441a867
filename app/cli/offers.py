"""`rentwatch offers`: the offers a campaign would rent now, before any money is spent: the engine's
own choice (`engine/preview.py`) in the rules' order, each with its tier, bid and expected cost
per delivered hour. Nothing is rented or recorded."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.campaign import Campaign
from ..core.errors import RentwatchError
from ..core.models import Offer
from ..core.offers.picks import Pick
from ..core.offers.reputation import delivered_hour_usd, market_odds, usd_at_odds
from ..core.policy import Policy
from ..core.text import clean

if TYPE_CHECKING:
    from ..engine.preview import Preview


class OfferSearchFailed(RentwatchError):
    title = "offer search failed"


def offer_json(paid: Offer, listed: Offer, pick: Pick | None) -> dict[str, Any]:
    """An offer as it would be rented (`paid`, its bid on the tier) beside its listing: what
    `offers --json` and the plan's first rentals both say of it."""
    return {
        "offer_id": paid.id,
        "machine_id": paid.machine_id,
        "gpu": clean(paid.gpu_name),
        "tier": None if pick is None else pick.tier,
        "bid": None if pick is None else pick.bid,
        "bid_floor": listed.bid_floor,
        "on_demand_dph": listed.gpu_dph,
        "dph": paid.dph_total,
        "usd_per_ref_hour": None
        if pick is None or pick.per_ref_h is None
        else round(pick.per_ref_h, 6),
    }


def rank_for(view: Preview, policy: Policy) -> list[dict[str, Any]]:
    """The fit offers in the order the engine would rent them, then every other offer with
    why it would not be rented, as `offers --json` says each (the market's words cleaned); the
    odds from the snapshot's faded record where it has one."""
    history = view.snapshot.history
    memory = view.snapshot.memory
    pool = market_odds(history)

    def row(o: Offer, listed: Offer, p: Pick | None, why: str) -> dict[str, Any]:
        record = history.get(o.machine_id)
        if memory is None:
            usd, odds = delivered_hour_usd(o.dph_total, record, pool)
        else:
            odds = memory.odds(
                o.gpu_name,
                o.dph_total,
                o.machine_id,
                o.host_id,
                policy.odds_prior_runs,
                o.reliability,
            )
            usd = usd_at_odds(o.dph_total, odds, record[2] if record else 0.0)
        return {
            "rank": None if p is None else p.rank,
            "rents_first": p is not None and p.first,
            **offer_json(o, listed, p),
            "host_id": o.host_id,
            "num_gpus": o.num_gpus,
            "expected_usd_per_delivered_hour": round(usd, 6),
            "p_deliver": round(odds, 4),
            # rentals of its machine our ledger has seen end (delivered or not)
            "runs_on_record": round(sum(record[:2])) if record else 0,
            "reliability": o.reliability,
            "geolocation": None if o.geolocation is None else clean(o.geolocation),
            "why": clean(why, 400) if p is not None else None,
            "tier_why": clean(p.bid_why, 400) if p is not None and p.bid_why else None,
            "unfit": clean(why, 400) if p is None else None,
        }

    out = [row(p.paid, p.listed, p, p.why) for p in view.picks]
    out += [row(o, o, None, view.unfit[o.id]) for o in view.offers if o.id in view.unfit]
    return out


async def preview(
    campaign: Campaign,
    policy: Policy,
    market_url: str,
    api_key: str,
    ledger_path: Path | None,
    say: Any = print,
) -> Preview:
    """The engine's own choice now (`engine.preview`): rents nothing, writes nothing."""
    from ..engine.preview import SearchFailed
    from ..engine.preview import preview as engine_preview
    from ..market.factory import market_at

    ledger = _history_ledger(ledger_path, say)
    try:
        async with market_at(market_url, api_key, timeout=campaign.http_timeout_s) as client:
            try:
                return await engine_preview(client, ledger, campaign, policy)
            except SearchFailed as exc:
                raise OfferSearchFailed(f"{clean(market_url)}: {clean(str(exc), 400)}") from None
    finally:
        ledger.close()


def _history_ledger(path: Path | None, say: Any) -> Any:
    """The ledger our record of machines comes from, read-only; an empty one in memory when
    there is none yet (a first campaign), or when a controller holds it for writing."""
    from ..ledger import Ledger, LedgerError

    if path is not None and path.exists():
        try:
            return Ledger(path, read_only=True)
        except LedgerError as exc:
            say(f"note: no machine record read ({exc})")
    return Ledger(":memory:")


def _money(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _table(
    rows: list[dict[str, Any]], campaign: Campaign, policy: Policy, limit: int, found: int
) -> None:
    """`rows` shown of the `found` offers the search answered (without --all the unfit are
    not shown, and the title said "40 fit of 40 offers" of 60)."""
    from rich.table import Table
    from rich.text import Text

    from .tables import print_table

    fit = [r for r in rows if r["rank"] is not None]
    first = sum(1 for r in fit if r["rents_first"])
    sized = any(r["usd_per_ref_hour"] is not None for r in fit)
    table = Table(
        "rank",
        "offer",
        "machine",
        "gpu",
        "tier",
        "bid",
        "min bid",
        "on-dem. $/h",
        "$/h",
        "$/ref-h" if sized else "exp. $/deliv. h",
        "p(deliver)",
        "runs" if len(fit) == len(rows) else "runs / why not",
        title=f"{campaign.name}: {len(fit)} fit of {found} offers, ranked by "
        f"{policy.rank} (policy {policy.name}); "
        + (f"the {first} marked * would be rented first" if first else "none would be rented now"),
        title_justify="left",
    )
    for r in rows[:limit]:
        fits, gpu, n = r["rank"] is not None, clean(r["gpu"], 60), r["num_gpus"]
        cost = r["usd_per_ref_hour"] if fits and sized else r["expected_usd_per_delivered_hour"]
        table.add_row(
            "-" if not fits else f"{r['rank']}{' *' if r['rents_first'] else ''}",
            str(r["offer_id"]),
            str(r["machine_id"]),
            Text(f"{n}x {gpu}" if n > 1 else gpu),
            "-" if not fits else ("bid" if r["bid"] is not None else "on-demand"),
            _money(r["bid"]),
            _money(r["bid_floor"]),
            f"{r['on_demand_dph']:.3f}",
            f"{r['dph']:.3f}",
            _money(cost, 3),
            f"{r['p_deliver']:.2f}",
            # the runs our ledger has seen on the machine (what its odds come from), or why
            # not; market text is never markup, and never an escape sequence
            str(r["runs_on_record"]) if fits else Text(r["unfit"]),
            style=None if fits else "dim",
        )
    print_table(table)
    if len(rows) > limit:
        print(f"({len(rows) - limit} more: --limit N, or --json for all)")


def run(args: argparse.Namespace) -> int:
    from ..core.policy import get_policy
    from ..ledger.store import default_ledger_path
    from .commands import _read_campaign, usable_key

    campaign = _read_campaign(args.campaign, args.upload_root)
    policy = get_policy(args.policy).with_overrides(campaign.policy)
    # one line naming the market and the cause when it cannot be used, before any search
    key = usable_key(args.market_url, args.api_key, campaign.http_timeout_s)
    ledger = Path(args.ledger) if args.ledger else default_ledger_path()

    def note(line: str) -> None:
        print(f"rentwatch: {clean(line, 400)}", file=sys.stderr)

    view = asyncio.run(preview(campaign, policy, args.market_url, key, ledger, note))
    if args.plan:
        from .plan import show

        first = [offer_json(p.paid, p.listed, p) for p in view.picks if p.first]
        return show(view, campaign, policy, args.json, first)
    rows = rank_for(view, policy)
    shown = rows if args.all else [r for r in rows if r["rank"] is not None]
    if args.json:
        print(json.dumps(shown, indent=1))
    elif not shown:
        print(f"no offer fits {campaign.name} now ({len(rows)} found; --all says why)")
    else:
        _table(shown, campaign, policy, args.limit, len(rows))
    return 0 if any(r["rank"] is not None for r in rows) else 1


def add_parser(sub: Any, positive_int: Any = int) -> None:
    p = sub.add_parser(
        "offers", help="the offers a campaign would rent, ranked as its policy ranks them"
    )
    _flags(p, positive_int)
    p.add_argument(
        "--plan",
        action="store_true",
        help="the job set's expected cost and time as a range, with the floor, instead",
    )
    q = sub.add_parser(
        "plan", help="what a campaign's job set is expected to cost and take (offers --plan)"
    )
    _flags(q, positive_int)
    q.set_defaults(plan=True)


def _flags(p: Any, positive_int: Any) -> None:
    from .flags import add_market_flag, add_policy_flag, add_upload_root_flag

    p.add_argument("--campaign", required=True, help="campaign TOML")
    add_market_flag(p, api_key=True)
    add_policy_flag(p)
    p.add_argument(
        "--ledger", help="our record of machines (default: the user's ledger, if there is one)"
    )
    p.add_argument("--all", action="store_true", help="also the offers that do not fit, and why")
    p.add_argument("--limit", type=positive_int, default=20, help="table rows (default 20)")
    p.add_argument("--json", action="store_true", help="every offer shown, as a JSON list")
    add_upload_root_flag(p)  # the campaign is read as `run` reads it, its upload rule included
    p.set_defaults(fn=run)
