"""Every published figure from one command: python -m bench [TARGET ...] [--list]

Each target is the exact command whose output a section of docs/benchmarks.md (or the README)
quotes. With no target, the system benches run (minutes); `all` runs every target, the policy
referee's included (an hour or more on 2 cores); figures go into docs/benchmarks.md by hand,
with the date and the box's load."""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time

PY = sys.executable
# name -> (the section of docs/benchmarks.md it feeds, the command)
TARGETS: dict[str, tuple[str, list[str]]] = {
    "ledger": ("Ledger at scale", [PY, "-m", "bench.ledger_bench"]),
    "ledger-open": ("The test suite", [PY, "-m", "bench.ledger_open"]),
    "sim-costs": ("The test suite", [PY, "-m", "bench.sim_costs"]),
    "suite": (
        "The test suite",
        [
            PY,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "bench.pytest_cpu",
            "--cpu-out",
            os.path.join(tempfile.gettempdir(), "rentwatch-suite-cpu.txt"),
            "-n",
            "6",
            "tests",
        ],
    ),
    "tui": ("Dashboard", [PY, "-m", "bench.tui_bench", "--seconds", "15"]),
    "engine": ("Engine at scale", [PY, "-m", "bench.engine_bench"]),
    "service": ("Dashboard over the controller's socket", [PY, "-m", "bench.service_bench"]),
    "service-hour": ("Dashboard over the controller's socket", [PY, "-m", "bench.service_hour"]),
    "team": ("The team store", [PY, "-m", "bench.team_bench"]),
    "webhook": (
        "A host gone offline, noticed on Vast's real webhook payload",
        [PY, "-m", "bench.webhook_bench", "--sizes", "100,1000"],
    ),
    "plan": (
        "The plan against the run",
        [PY, "-m", "bench.plan_bracket", "--family-seed", "5821", "--family", "6", "--json"],
    ),
    "baseline": (
        "Policy referee: the baseline (and the README's ratio to the floor)",
        [
            PY,
            "-m",
            "bench.baseline",
            "--family-seed",
            "80801",
            "--family-seed",
            "80802",
            "--family",
            "2",
            "--campaign",
            "bench/bid_campaign.toml",
            "--deadline-min",
            "600",
            "--workers",
            "2",
        ],
    ),
}
SYSTEM = ("ledger", "tui", "engine", "service", "service-hour")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="names, or `all`")
    parser.add_argument("--list", action="store_true", help="list the targets and their commands")
    args = parser.parse_args(argv)
    if args.list:
        for name, (section, cmd) in TARGETS.items():
            print(f"{name:13} {section}\n{'':13} {' '.join(cmd[1:])}")
        return 0
    names = list(TARGETS) if args.targets == ["all"] else args.targets or list(SYSTEM)
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        parser.error(f"unknown target {', '.join(unknown)} (known: {', '.join(TARGETS)}, all)")
    print(
        f"# {time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.machine()}, "
        f"Python {platform.python_version()}), load average {' '.join(f'{x:.1f}' for x in _load())}"
    )
    for name in names:
        section, cmd = TARGETS[name]
        print(f"\n## {name}: {section}\n$ python {' '.join(cmd[1:])}", flush=True)
        rc = subprocess.run(cmd, check=False).returncode
        if rc:
            print(f"{name} failed (exit {rc})", file=sys.stderr)
            return rc
    return 0


def _load() -> tuple[float, float, float]:
    try:
        return os.getloadavg()
    except OSError:
        return (0.0, 0.0, 0.0)


if __name__ == "__main__":
    raise SystemExit(main())
