"""Ledger at scale: 1,000,000 events and 10,000,000 samples, then the receipt and one
instance's history. Run: python -m bench.ledger_bench [--events N] [--samples N]."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import duckdb
from rentwatch.ledger import Ledger


def fill(path: Path, events: int, samples: int) -> None:
    Ledger(path).close()  # schema and views
    con = duckdb.connect(str(path))
    per = (
        10  # events per instance: create intent/outcome, status x3, preflight, stop x2, destroy x2
    )
    con.execute(f"""
    INSERT INTO events (seq, ts, wall, campaign, instance_id, machine_id, host_id, offer_id, gpu_name,
                        gpu_dph, storage_dph, actor, kind, phase, ok, reason, detail, intent_seq)
    SELECT i + 1, (i // {per}) * 60.0 + (i % {per}) * 30, 0, 'c' || ((i // {per}) % 20),
           i // {per}, (i // {per}) % 5000, (i // {per}) % 3000, 1000000 + i // {per}, 'RTX 3090',
           0.2 + ((i // {per}) % 50) / 100, 0.01, 'rule:bench',
           ['create', 'create', 'status', 'status', 'status', 'preflight_passed', 'stop', 'stop',
            'destroy', 'destroy'][i % {per} + 1],
           CASE WHEN i % {per} IN (0, 6, 8) THEN 'intent' WHEN i % {per} IN (1, 7, 9) THEN 'outcome' ELSE 'fact' END,
           true, 'bench event',
           CASE WHEN i % {per} = 4 THEN '{{"status": "running"}}' WHEN i % {per} = 1 THEN '{{"gpu_billing": "created"}}'
                ELSE '{{}}' END, NULL
    FROM range({events}) t(i)""")
    con.execute(f"""
    INSERT INTO samples SELECT i % {events // per}, i * 1.0, 90, 1900, 1950, 0, 70, 300, 18000
    FROM range({samples}) t(i)""")
    con.execute("CHECKPOINT")
    con.close()


def timed(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--samples", type=int, default=10_000_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.duckdb"
        t0 = time.perf_counter()
        fill(path, args.events, args.samples)
        fill_s = time.perf_counter() - t0
        led = Ledger(path)
        receipt_s = timed(lambda: led.receipt())
        history_s = timed(lambda: led.events(where="instance_id = ?", params=[4242]))
        samples_s = timed(
            lambda: led.query("select avg(util), max(ts) from samples where instance_id = 4242")
        )
        t0 = time.perf_counter()
        for i in range(2000):
            led.record("note", at=i, actor="engine", reason="append")
        append_us = (time.perf_counter() - t0) / 2000 * 1e6
        print(f"events={args.events} samples={args.samples} fill={fill_s:.1f}s")
        print(f"receipt: {receipt_s * 1000:.0f} ms (best of 3)")
        print(f"one instance's events: {history_s * 1000:.1f} ms")
        print(f"one instance's samples summary: {samples_s * 1000:.1f} ms")
        print(f"single committed append: {append_us:.0f} us")
        led.close()


if __name__ == "__main__":
    main()
