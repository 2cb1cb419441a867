"""`default` against `seed` over one or more referee runs: the medians the issues' targets are
stated in, and a row per market (`git show fde59d7^:docs/benchmarks.md`, "Buying delivered work").

    python -m bench.referee_compare R11.json:11 R4242.json:4242 [--deadline-min 900]
        [--policy 'default+value_of_time_usd_per_h=0.25']

Each argument is a `rentwatch referee --json` output and the family seed it ran (for the
row names). Ratios are default (or `--policy`, a name as the referee was given it) over seed
per market, then the median; a run never done is
counted at the deadline in the second time figure."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def pairs(
    paths: list[str], policy: str = "default"
) -> list[tuple[str, int, dict[str, Any], dict[str, Any]]]:
    out = []
    for arg in paths:
        path, _, family = arg.partition(":")
        by: dict[int, dict[str, dict[str, Any]]] = {}
        for r in json.loads(Path(path).read_text())["runs"]:
            by.setdefault(r["market"], {})[r["policy"]] = r
        for m, pr in sorted(by.items()):
            if "seed" in pr and policy in pr:
                out.append((family or path, m, pr["seed"], pr[policy]))
    return out


def report(rows: list[tuple[str, int, dict[str, Any], dict[str, Any]]], deadline: float) -> str:
    usd = [_ratio(t["total_usd"], s["total_usd"]) for _, _, s, t in rows]
    done = [(s.get("time_to_done_min"), t.get("time_to_done_min")) for _, _, s, t in rows]
    both = [_ratio(b, a) for a, b in done if a and b]
    capped = [_ratio(b or deadline, a or deadline) for a, b in done]
    lines = [f"markets: {len(rows)}"]
    lines.append(f"total USD: {statistics.median(x for x in usd if x):.3f}x")
    lines.append(f"time to done, both done ({len(both)}): {statistics.median(both):.3f}x")
    lines.append(f"time to done, never at {deadline:.0f} min: {statistics.median(capped):.3f}x")
    dearer = sum(1 for x in usd if x and x > 1.05)
    slower = sum(1 for x in capped if x and x > 1.05)
    lines.append(f"markets >5% dearer / slower: {dearer} / {slower}")
    for i, name in ((2, "seed"), (3, "default")):
        runs = [r[i] for r in rows]
        never = sum(1 for r in runs if r.get("time_to_done_min") is None)
        kills = sum(r.get("false_kills") or 0 for r in runs)
        usd_h = statistics.median(
            r["usd_per_work_hour"] for r in runs if r.get("usd_per_work_hour")
        )
        lines.append(
            f"{name}: median USD {statistics.median(r['total_usd'] for r in runs):.3f}, "
            f"USD per ref-h {usd_h:.3f}, never done {never}, false kills {kills}"
        )
    lines.append("")
    lines.append(
        "| family:market | seed USD | default USD | USD ratio | seed done | default done "
        "| time ratio | seed $/ref-h | default $/ref-h | false kills s/d | default ended |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for fam, m, s, t in rows:
        mins = [s.get("time_to_done_min"), t.get("time_to_done_min")]
        shown = ["-" if v is None else f"{v:.0f}" for v in mins]
        tr = _ratio(mins[1], mins[0])
        per = [
            "-" if not r.get("usd_per_work_hour") else f"{r['usd_per_work_hour']:.3f}"
            for r in (s, t)
        ]
        lines.append(
            f"| {fam}:{m} | {s['total_usd']:.3f} | {t['total_usd']:.3f} | "
            f"{t['total_usd'] / s['total_usd']:.2f} | {shown[0]} | {shown[1]} | "
            f"{'-' if tr is None else f'{tr:.2f}'} | {per[0]} | {per[1]} | "
            f"{s.get('false_kills') or 0}/{t.get('false_kills') or 0} | {str(t.get('ended'))[:60]} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.referee_compare")
    ap.add_argument("runs", nargs="+", help="referee JSON[:family seed]")
    ap.add_argument("--deadline-min", type=float, default=900.0)
    ap.add_argument("--policy", default="default", help="the policy set against seed")
    args = ap.parse_args()
    print(report(pairs(args.runs, args.policy), args.deadline_min))


if __name__ == "__main__":
    main()
