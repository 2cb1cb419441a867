"""`rentwatch end --campaign NAME [--ledger PATH]`: end a campaign so nothing of it keeps billing
unwatched, through its controller when one runs, else the same engine code on a bare session. It
lists what it would end and asks for the campaign's name typed (`--yes NAME` for scripts). Exit 0
when nothing is left billing; 1 when something is, with the command that ends it."""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import RentwatchError
from ..core.text import clean
from ..ledger import EventKind
from ..ledger.holdings import Holding, holdings_sql
from ..ledger.job_reads import literal
from .flags import add_market_flag
from .ledger_pick import select

SETTLE_S = 60.0  # wall seconds to wait for an ended controller to let go of the ledger


class EndRefused(RentwatchError):
    title = "not ended"


def holdings(ledger: str | Path, campaign: str) -> list[Holding]:
    return [Holding.from_row(r) for r in select(ledger, holdings_sql(campaign))]


def _known(ledger: Path, campaign: str) -> bool:
    rows = select(ledger, f"SELECT count(*) AS n FROM events WHERE campaign = {literal(campaign)}")
    return bool(rows and rows[0]["n"])


def _listing(name: str, held: list[Holding], destroy: bool) -> list[str]:
    verified = sum(1 for h in held if h.verified)
    unpulled = sum(1 for h in held if h.unpulled)
    per_day = sum(h.storage_usd_per_day for h in held)
    act = (
        "would DESTROY all of them"
        if destroy
        else "would stop the verified ones and destroy the rest"
    )
    lines = [
        f"{name} holds {len(held)} rental(s): {verified} verified, {unpulled} with outputs not "
        f"pulled off, storage ${per_day:.3f}/day in all; it {act}:"
    ]
    lines += [f"  {h.line()}" for h in held]
    if not destroy and any(h.verified for h in held):
        lines.append("  (stopped rentals keep billing storage: --destroy ends them too)")
    return lines


def _confirm(name: str, yes: str | None, destroy: bool) -> None:
    if yes is not None:
        if yes.strip() != name:
            raise EndRefused(f"--yes {yes!r} does not name the campaign {name!r}: nothing done")
        return
    what = "destroy everything listed" if destroy else "end it"
    print(f"type the campaign's name ({name}) to {what}: ", end="", flush=True)
    typed = sys.stdin.readline()
    if typed.strip() != name:
        raise EndRefused(f"{typed.strip()[:40]!r} is not {name!r}: nothing done")


def _through_controller(remote: Any, name: str, destroy: bool) -> list[str]:
    from ..engine.intents import EndIntent

    st = remote.status()
    if st.get("campaign") != name:
        raise EndRefused(
            f"the ledger is held by the controller of campaign {st.get('campaign')!r} "
            f"(pid {st.get('pid')}): end {name} once it has let go of the ledger"
        )
    reply = remote.intent(EndIntent(destroy=destroy, typed=name if destroy else ""))
    return [f"controller: {line}" for line in reply.lines or (reply.message,)]


async def _bare(url: str, key: str, ledger_path: Path, name: str, destroy: bool,
                yes: str | None) -> tuple[list[str], list[Any]] | None:  # fmt: skip
    """No controller runs: the engine's own end on a bare session. What the campaign holds is
    adopted, listed and confirmed first. Returns what was done and the rentals still listed under
    the campaign's label; None when nothing was held."""
    from ..engine.bare import adopt, bare_supervisor
    from ..engine.ending import end_campaign
    from ..ledger import Ledger
    from ..ledger.holdings import read_holdings
    from ..market.factory import market_at

    with Ledger(ledger_path) as ledger:
        async with market_at(url, key) as market:
            sup = bare_supervisor(market, ledger, name, print)
            try:
                await adopt(sup)
                held = read_holdings(ledger, name)
                if not held:
                    return None
                for line in _listing(name, held, destroy):
                    print(line)
                _confirm(name, yes, destroy)
                done = list((await end_campaign(sup, destroy, name if destroy else "")).lines)
                rows = await market.list_instances()
            finally:
                await sup.close()
            still = [i for i in rows if sup.recovery.ours(i) and i.target_state != "destroyed"]
    return done, still


def _left(
    ledger: Path, name: str, monotonic: Callable[[], float] = time.monotonic
) -> list[Holding]:
    """What is left once the end is done; an ended controller may hold the ledger a moment
    longer (it releases and closes), so a refused read is tried again for a while."""
    deadline = monotonic() + SETTLE_S
    while True:
        try:
            return holdings(ledger, name)
        except RentwatchError:
            if monotonic() > deadline:
                raise
            time.sleep(0.5)


def _ran_on(ledger: Path, name: str) -> str | None:
    """The market the campaign rented on, as the ledger's latest campaign_start says."""
    from ..ledger import Ledger

    with Ledger(ledger, read_only=True) as led:
        starts = led.campaign_events(name, EventKind.CAMPAIGN_START)
    ran_on = next(
        (e.detail.get("market") for e in reversed(starts) if e.detail.get("market")), None
    )
    return str(ran_on) if ran_on else None


def run(args: argparse.Namespace) -> int:
    from ..engine.ending import end_command
    from ..market.factory import find_api_key
    from .controllers import controller_for_ledger
    from .ledger_pick import ledger_for

    name = args.campaign
    ledger = ledger_for(args.ledger, campaign=name)  # the user's ledger that knows it
    if not ledger.exists():
        raise EndRefused(f"no ledger at {ledger}")
    if not _known(ledger, name):
        raise EndRefused(f"no campaign {name!r} in the ledger {ledger}")
    remote = controller_for_ledger(ledger)
    # the market the campaign rented on (a controller holding the ledger rents on its own)
    ran_on = _ran_on(ledger, name) if remote is None else None
    if ran_on is not None and ran_on.rstrip("/") != args.market_url.rstrip("/"):
        # another market than the one given (a demo's simulator, gone with its controller):
        # nothing is sent to this one (a demo's rentals as destroys to the real account, say)
        if not holdings(ledger, name):
            print(
                f"nothing of {name} is left billing in its ledger; its market {ran_on} was not "
                f"asked (pass --market-url {shlex.quote(ran_on)} to ask it)"
            )
            return 0
        raise EndRefused(
            f"{name} rented on {ran_on}, not {args.market_url}: nothing sent; pass "
            f"--market-url {ran_on} if that market still runs"
        )
    on_market: list[Any] = []
    if remote is None:  # the market first: what runs under the label is the campaign's too
        key = find_api_key(args.api_key)
        ended = asyncio.run(_bare(args.market_url, key, ledger, name, args.destroy, args.yes))
        if ended is None:
            print(f"nothing of {name} is left billing")
            return 0
        done, on_market = ended
    else:
        with remote:
            held = holdings(ledger, name)
            for line in _listing(name, held, args.destroy) if held else [f"{name} holds nothing"]:
                print(line)
            _confirm(name, args.yes, args.destroy)
            done = _through_controller(remote, name, args.destroy)
    for line in done:
        print(line)
    left = _left(ledger, name)
    unheld = [i for i in on_market if i.id not in {h.instance_id for h in left}]
    if not left and not unheld:
        print(f"nothing of {name} is left billing")
        return 0
    per_day = sum(h.storage_usd_per_day for h in left)
    print(f"left billing ({len(left) + len(unheld)}, storage ${per_day:.3f}/day):")
    for h in left:
        print(f"  {h.line()}")
    for i in unheld:  # the market lists it under our label, the ledger has it gone
        status = clean(i.status or "unknown", 40)
        print(f"  i:{i.id} m:{i.machine_id}: still listed by the market under the label ({status})")
    market = (ran_on or args.market_url).rstrip("/")
    print(f"end them: {end_command(name, ledger, market, destroy=True)}")
    return 1


def add_parser(sub: Any) -> None:
    p = sub.add_parser("end", help="end a campaign: stop, or destroy, everything it holds")
    p.add_argument("--campaign", required=True, help="the campaign's name")
    # optional, so that the quit dialog's hint (`rentwatch end --campaign demo --destroy`) works
    p.add_argument("--ledger", help="its ledger (default: the user's ledger that knows it)")
    add_market_flag(p, api_key=True)
    p.add_argument(
        "--destroy", action="store_true", help="destroy every rental it holds, verified ones too"
    )
    p.add_argument("--yes", metavar="NAME", help="confirm with the campaign's name (no prompt)")
    p.set_defaults(fn=run)
