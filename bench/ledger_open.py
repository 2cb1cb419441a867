"""What the ledger costs each process that opens it, and each poll: CPU per open (a new file,
one reopened by its writer, one opened read-only as `rentwatch receipt` or `jobs` does) and per
clock tick (`Ledger.tick`, once a poll). CPU, not wall time: the box's load moves the wall.
Run: python -m bench.ledger_open [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from rentwatch.ledger import Ledger


def cpu_ms(fn: Callable[[int], object], repeat: int) -> float:
    """Median CPU milliseconds of one call."""
    got = []
    for i in range(repeat):
        c0 = time.process_time()
        fn(i)
        got.append(time.process_time() - c0)
    return statistics.median(got) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "l.duckdb"
        with Ledger(path) as led:
            for i in range(100):
                led.record("note", at=float(i), actor="engine", reason="fill", campaign="c")
        cases: list[tuple[str, Callable[[int], object]]] = [
            ("open a new ledger", lambda i: Ledger(Path(d) / f"n{i}.duckdb").close()),
            ("reopen by its writer", lambda i: Ledger(path).close()),
            ("open read-only", lambda i: Ledger(path, read_only=True).close()),
        ]
        for what, fn in cases:
            print(f"{what:>22}: {cpu_ms(fn, args.repeat):6.1f} ms CPU (median)")
        with Ledger(path) as led:
            tick = cpu_ms(lambda i: led.tick(1000.0 + i, "http://market"), args.repeat * 5)
        print(f"{'a poll clock tick':>22}: {tick:6.1f} ms CPU (median)")


if __name__ == "__main__":
    main()
