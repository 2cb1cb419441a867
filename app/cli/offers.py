"""`rentwatch offers`: the offers a campaign would rent now, before any money is spent.

The same search, fit and ranking the engine's offer book uses (`engine/offers.py`,
`core/offer_choice.py`): the campaign's query and disk, its price ceiling and CUDA, the
policy's sanity checks and ranking, and our own record of each machine from the ledger (with
its quarantine where the policy keeps one). Each offer carries its expected cost per delivered
hour (`core.reputation.delivered_hour_usd`). Nothing is rented or recorded."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.campaign import Campaign
from ..core.errors import RentwatchError
from ..core.models import Offer
from ..core.offer_choice import choose_offers, unfit_reason
from ..core.policy import Policy
from ..core.reputation import delivered_hour_usd, market_odds, usd_at_odds
from ..core.text import clean
from ..core.track_record import Memory
from ..market.vast.client import REAL_MARKET


class OfferSearchFailed(RentwatchError):
    title = "offer search failed"


@dataclass(frozen=True)
class Ranked:
    """One offer as the campaign sees it: its rank (None: not rented), or why it does not fit."""

    offer: Offer
    rank: int | None
    expected_usd_per_h: float
    p_deliver: float
    runs: int  # rentals of its machine our ledger has seen end (delivered or not)
    why: str  # the ranking's sentence (what the ledger records when it is rented), or unfit

    def as_json(self) -> dict[str, Any]:
        """The market's words cleaned, as on every output path (`core.text.clean`)."""
        o = self.offer
        return {
            "rank": self.rank,
            "offer_id": o.id,
            "machine_id": o.machine_id,
            "host_id": o.host_id,
            "gpu": clean(o.gpu_name),
            "num_gpus": o.num_gpus,
            "dph": o.dph_total,
            "expected_usd_per_delivered_hour": round(self.expected_usd_per_h, 6),
            "p_deliver": round(self.p_deliver, 4),
            "runs_on_record": self.runs,
            "reliability": o.reliability,
            "geolocation": None if o.geolocation is None else clean(o.geolocation),
            "why": clean(self.why, 400) if self.rank is not None else None,
            "unfit": clean(self.why, 400) if self.rank is None else None,
        }


def rank_for(
    offers: list[Offer],
    fit: list[Offer],
    history: dict[int, tuple[float, float, float]],
    policy: Policy,
    unfit: dict[int, str],
    memory: Memory | None = None,
) -> list[Ranked]:
    """The fit offers in the order the offer book would rent them (one per machine, as
    `OfferBook.best` picks), then every other offer with why it would not be rented."""
    pool = market_odds(history)
    out: list[Ranked] = []
    chosen = choose_offers(
        fit, len(fit), history, policy.rank, memory=memory, strength=policy.odds_prior_runs
    )

    def priced(o: Offer) -> tuple[float, float]:
        if memory is None:
            return delivered_hour_usd(o.dph_total, history.get(o.machine_id), pool)
        p = memory.odds(o.gpu_name, o.dph_total, o.machine_id, o.host_id, policy.odds_prior_runs)
        return usd_at_odds(o.dph_total, p, history.get(o.machine_id, (0, 0, 0.0))[2]), p

    first_on: dict[int, int] = {}

    def runs(o: Offer) -> int:
        good, bad, _ = history.get(o.machine_id, (0, 0, 0.0))
        return round(good + bad)  # rentals' worth, faded with age

    for n, (o, why) in enumerate(chosen, 1):
        usd, p = priced(o)
        out.append(Ranked(o, n, usd, p, runs(o), why))
        first_on[o.machine_id] = o.id
    ranked = {o.id for o, _ in chosen}
    for o in offers:
        if o.id in ranked:
            continue
        usd, p = priced(o)
        why = unfit.get(o.id) or (
            f"offer {first_on[o.machine_id]} on the same machine ranks first"
            if o.machine_id in first_on
            else "not ranked"
        )
        out.append(Ranked(o, None, usd, p, runs(o), why))
    return out


async def preview(
    campaign: Campaign,
    policy: Policy,
    market_url: str,
    api_key: str,
    ledger_path: Path | None,
    say: Any = print,
) -> list[Ranked]:
    """Search as the engine's offer book does, and rank the answer; rents nothing."""
    from ..engine.fleet import Fleet
    from ..engine.journal import Journal
    from ..engine.offers import OfferBook
    from ..market.vast.client import VastClient

    ledger = _history_ledger(ledger_path, say)
    said: list[str] = []
    try:
        async with VastClient(market_url, api_key, timeout=campaign.http_timeout_s) as client:
            await client.sync_clock()
            fleet = Fleet(campaign.fleet)
            # the quarantine in force under the policy, as a start of this campaign reads it
            fleet.restore(ledger, campaign.name, policy, client.now())
            journal = Journal(ledger, campaign.name, client, log=said.append)
            book = OfferBook(client, ledger, journal, fleet, campaign, policy)
            await book.refresh()
            if book.offers is None:  # the book says a failed search and keeps going; we stop
                raise OfferSearchFailed(
                    f"{clean(market_url)}: {clean(said[-1], 400) if said else 'no answer'}"
                )
            offers = list(book.offers)
            fit = book.fit()
            memory = book.remembered()  # the record, whichever way the policy ranks
            history = memory.history()
            terms, skip = book.terms(), book.exclusions()
    finally:
        ledger.close()
    unfit = {o.id: why for o in offers if (why := unfit_reason(o, terms, policy, skip)) is not None}
    return rank_for(offers, fit, history, policy, unfit, memory)


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


def _table(rows: list[Ranked], campaign: Campaign, policy: Policy, limit: int, found: int) -> None:
    """`rows` shown of the `found` offers the search answered (without --all the unfit are
    not shown, and the title said "40 fit of 40 offers" of 60)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    fit = [r for r in rows if r.rank is not None]
    table = Table(
        "rank",
        "offer",
        "machine",
        "gpu",
        "$/h",
        "exp. $/deliv. h",
        "p(deliver)",
        "runs" if len(fit) == len(rows) else "runs / why not",
        title=f"{campaign.name}: {len(fit)} fit of {found} offers, ranked by "
        f"{policy.rank} (policy {policy.name}); the first {campaign.fleet} would be rented",
        title_justify="left",
    )
    for r in rows[:limit]:
        o = r.offer
        gpu = clean(o.gpu_name, 60)
        table.add_row(
            str(r.rank) if r.rank is not None else "-",
            str(o.id),
            str(o.machine_id),
            Text(f"{o.num_gpus}x {gpu}" if o.num_gpus > 1 else gpu),
            f"{o.dph_total:.3f}",
            f"{r.expected_usd_per_h:.3f}",
            f"{r.p_deliver:.2f}",
            # the runs our ledger has seen on the machine (what its odds come from), or why
            # not; market text is never markup, and never an escape sequence
            str(r.runs) if r.rank is not None else Text(clean(r.why, 400)),
            style=None if r.rank is not None else "dim",
        )
    Console().print(table)
    if len(rows) > limit:
        print(f"({len(rows) - limit} more: --limit N, or --json for all)")


def run(args: argparse.Namespace) -> int:
    from ..core.policy import get_policy
    from ..ledger.store import default_ledger_path
    from ..market.vast.keys import find_api_key
    from .commands import _read_campaign

    campaign = _read_campaign(args.campaign, args.upload_root)
    policy = get_policy(args.policy).with_overrides(campaign.policy)
    key = find_api_key(args.api_key)
    ledger = Path(args.ledger) if args.ledger else default_ledger_path()

    def note(line: str) -> None:
        print(f"rentwatch: {clean(line, 400)}", file=sys.stderr)

    from ..market.reach import check_market
    from ..market.vast.transport import DEFAULT_TIMEOUT

    # one line naming the market and the cause when it cannot be used, before any search
    asyncio.run(check_market(args.market_url, key, campaign.http_timeout_s or DEFAULT_TIMEOUT))
    rows = asyncio.run(preview(campaign, policy, args.market_url, key, ledger, note))
    shown = rows if args.all else [r for r in rows if r.rank is not None]
    if args.json:
        print(json.dumps([r.as_json() for r in shown], indent=1))
    elif not shown:
        print(f"no offer fits {campaign.name} now ({len(rows)} found; --all says why)")
    else:
        _table(shown, campaign, policy, args.limit, len(rows))
    return 0 if any(r.rank is not None for r in rows) else 1


def add_parser(sub: Any, positive_int: Any = int) -> None:
    """Register `rentwatch offers` on the CLI's subparsers."""
    p = sub.add_parser(
        "offers", help="the offers a campaign would rent, ranked as its policy ranks them"
    )
    p.add_argument("--campaign", required=True, help="campaign TOML")
    p.add_argument("--market-url", default=REAL_MARKET, help=f"default {REAL_MARKET}")
    p.add_argument("--api-key", help="prefer VAST_API_KEY (this flag shows in the process list)")
    p.add_argument("--policy", default="default", help="naive, seed or default")
    p.add_argument(
        "--ledger", help="our record of machines (default: the user's ledger, if there is one)"
    )
    p.add_argument("--all", action="store_true", help="also the offers that do not fit, and why")
    p.add_argument("--limit", type=positive_int, default=20, help="table rows (default 20)")
    p.add_argument("--json", action="store_true", help="every offer shown, as a JSON list")
    from .flags import add_upload_root_flag

    add_upload_root_flag(p)  # the campaign is read as `run` reads it, its upload rule included
    p.set_defaults(fn=run)
