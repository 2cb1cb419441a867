"""The referee's table: its JSON's summary as text, one line a policy, and each policy's
worst market against `seed`."""

from __future__ import annotations

from typing import Any

from .score import RATIO_KEYS


def _fmt(v: Any, fmt: str, never: str = "never") -> str:
    return never if v is None else f"{v:{fmt}}"


def format_table(result: dict[str, Any]) -> str:
    markets = len({r["market"] for r in result["runs"]})
    lines = [
        f"referee: {result['scenario']}, {markets} market(s), {len(result['runs'])} run(s); "
        "medians over runs (never = not within the deadline)"
    ]
    lines.append(
        f"{'policy':8} {'total $':>8} {'to done min':>11} {'dud $':>7} {'duds':>5} "
        f"{'dud life':>8} {'false kills':>11} {'to fleet min':>12} {'$/GPU-h':>8} "
        f"{'$ vs seed':>9} {'done vs':>8} {'dud$ vs':>8} {'fleet vs':>8} {'vs floor':>8}"
    )
    for policy, s in result["summary"].items():

        def x(key: str, s: dict[str, Any] = s) -> str:
            return _fmt(s.get(key), ".2f", "-") + ("x" if s.get(key) is not None else "")

        lines.append(
            f"{policy:8} {_fmt(s['total_usd'], '.3f'):>8} {_fmt(s['time_to_done_min'], '.0f'):>11} "
            f"{_fmt(s['dud_usd'], '.3f'):>7} {_fmt(s['duds'], '.0f'):>5} "
            f"{_fmt(s['dud_mean_lifetime_min'], '.1f'):>8} {_fmt(s['false_kills'], '.0f'):>11} "
            f"{_fmt(s['time_to_fleet_min'], '.0f'):>12} {_fmt(s['usd_per_gpu_hour'], '.3f'):>8} "
            f"{x('total_usd_vs_seed'):>9} {x('time_to_done_vs_seed'):>8} "
            f"{x('dud_usd_vs_seed'):>8} {x('time_to_fleet_vs_seed'):>8} {x('vs_floor'):>8}"
        )
    for policy, s in result["summary"].items():
        w = s.get("worst_market")
        if policy != "seed" and w is not None and markets > 1:

            def shown(k: str, w: dict[str, Any] = w) -> str:
                if w[k] is not None:
                    return f"{w[k]:.2f}x"
                return "never" if RATIO_KEYS[k] in w.get("never", ()) else "-"

            ratios = ", ".join(
                f"{k.removesuffix('_vs_seed')} {shown(k)}"
                for k in ("total_usd_vs_seed", "time_to_done_vs_seed", "dud_usd_vs_seed")
            )
            lines.append(f"{policy}: worst market {w['market']} against seed: {ratios}")
    return "\n".join(lines)
