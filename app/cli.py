"""The `rentwatch` command: demo, watch, sim, run, receipt, ledger."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys

from .core.errors import RentwatchError


def _cmd_sim(args: argparse.Namespace) -> int:
    from .sim.scenario import load_scenario
    from .sim.server import SimServer

    scenario = load_scenario(args.scenario)
    server = SimServer(scenario, port=args.port, api_key=args.api_key)

    async def main() -> None:
        await server.start()
        print(server.url, flush=True)
        if not args.api_key:
            print(f"api key: {server.api_key}", flush=True)
        print(
            f"scenario {scenario.name}: seed {scenario.seed}, {scenario.offers} offers, "
            f"time scale {scenario.time_scale:g}x, gpu billing from {scenario.gpu_billing}",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rentwatch", description=__doc__)
    sub = p.add_subparsers(dest="command")

    s = sub.add_parser("sim", help="run the simulated marketplace until killed")
    s.add_argument("--scenario", help="scenario TOML (default: the article's market)")
    s.add_argument("--port", type=int, default=0)
    s.add_argument("--api-key", help="the account's API key (default: a random one, printed)")
    s.set_defaults(fn=_cmd_sim)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "fn", None):
        parser.print_help()
        return 2
    try:
        return int(args.fn(args) or 0)
    except RentwatchError as exc:
        print(f"rentwatch: {exc.title}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
