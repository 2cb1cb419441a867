"""The team store at scale: 10 controllers with 1,000 rentals each on one PostgreSQL store.

Measures, on a throwaway cluster this script starts (tests/team_pg.py; or `--url URL` with
the password in PGPASSWORD):
- ship: each controller's whole ledger shipped, all ten at once (events per second);
- catch-up: each pulls its nine teammates' events into its replica;
- sync lag: one event recorded by a controller until every teammate's replica holds it, with
  the sync threads running as in a campaign (median and max over the trials);
- the store's size per million events (the events table with its indexes);
- the poll's cost: what a team adds to a poll (the teammates' quarantines read each poll, and
  the record of rentals with the teammates' duds when a create is in view), against the same
  reads on the ledger alone.

Run: python -m bench.team_bench [--controllers 10] [--rentals 1000] [--trials 5]"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psycopg
from rentwatch.ledger import Ledger
from rentwatch.ledger.team.config import TeamConfig
from rentwatch.ledger.team.store import TeamStore
from rentwatch.ledger.team.sync import TeamSync

MARKET = "https://console.vast.ai"
PER = 10  # events per rental: create intent/outcome, status x3, preflight or abandon, stop, ...


def fill(path: Path, who: int, rentals: int) -> None:
    """One controller's ledger: a campaign on MARKET and `rentals` rentals, one in five a dud
    whose machine is quarantined; machine ids shared across controllers (one market)."""
    with Ledger(path) as ledger:
        ledger.record(
            "campaign_start",
            at=0.0,
            actor="engine",
            reason="bench",
            campaign=f"c{who}",
            detail={"market": MARKET},
        )
    con = duckdb.connect(str(path))
    con.execute(f"""
    INSERT INTO events (seq, ts, wall, campaign, instance_id, machine_id, host_id, offer_id,
                        gpu_name, gpu_dph, storage_dph, actor, kind, phase, ok, reason, detail,
                        intent_seq)
    SELECT i + 2, 1 + (i // {PER}) * 60.0 + (i % {PER}) * 5, 0, 'c{who}',
           {who} * 10000000 + i // {PER}, (i // {PER} * 7 + {who}) % 3000, 1, 1, 'RTX 3090',
           0.2, 0.01, 'rule:bench',
           CASE WHEN (i // {PER}) % 5 = 0 THEN
             ['create', 'create', 'status', 'status', 'abandon', 'quarantine', 'destroy',
              'destroy', 'note', 'note'][i % {PER} + 1]
           ELSE
             ['create', 'create', 'status', 'status', 'status', 'preflight_passed', 'stop',
              'stop', 'note', 'note'][i % {PER} + 1] END,
           CASE WHEN i % {PER} IN (0, 6) THEN 'intent' WHEN i % {PER} IN (1, 7) THEN 'outcome'
                ELSE 'fact' END,
           true, 'bench event',
           CASE WHEN i % {PER} = 4 AND (i // {PER}) % 5 <> 0 THEN '{{"status": "running"}}'
                WHEN i % {PER} = 1 THEN '{{"gpu_billing": "running"}}'
                WHEN i % {PER} = 5 AND (i // {PER}) % 5 = 0 THEN '{{"until": null}}'
                ELSE '{{}}' END,
           CASE WHEN i % {PER} IN (1, 7) THEN i + 1 END
    FROM range({rentals * PER}) t(i)""")
    con.close()


def timed(fn, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--controllers", type=int, default=10)
    ap.add_argument("--rentals", type=int, default=1000)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--url", help="an existing store's server (password in PGPASSWORD)")
    args = ap.parse_args()
    server = None
    if args.url:
        url = args.url
    else:
        import os

        from tests.team_pg import start_cluster

        server = start_cluster()
        os.environ["PGPASSWORD"] = server.password
        server.admin("CREATE DATABASE team_bench")
        url = server.url(db="team_bench")
    try:
        run(url, args)
    finally:
        if server is not None:
            from tests.team_pg import stop_cluster

            stop_cluster(server)


def run(url: str, args: argparse.Namespace) -> None:
    owner = TeamStore(TeamConfig(url, "owner"))
    owner.init()
    owner.close()
    n = args.controllers
    tmp = Path(tempfile.mkdtemp(prefix="team-bench-"))
    for k in range(n):
        fill(tmp / f"l{k}.duckdb", k, args.rentals)
    ledgers = [Ledger(tmp / f"l{k}.duckdb") for k in range(n)]
    syncs = [TeamSync(ledgers[k], TeamConfig(url, f"op{k}"), MARKET, f"c{k}") for k in range(n)]
    events = sum(len(lg.raw_events(0, 10**9)) for lg in ledgers)

    def every(method: str) -> float:
        t0 = time.perf_counter()
        threads = [threading.Thread(target=getattr(s, method)) for s in syncs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - t0

    # ship only (the pull comes after: every ledger is in the store first)
    ship_s = every("_ship_all")
    print(f"controllers {n}, rentals each {args.rentals}, events in all {events:,}")
    print(f"ship        {ship_s:.1f} s for all ({events / ship_s:,.0f} events/s, 10 at once)")
    pull_s = every("round")
    pulled = sum(s.pulled for s in syncs)
    print(f"catch-up    {pull_s:.1f} s for each to pull its teammates' ({pulled:,} events in all)")

    for s in syncs:
        s.start()
    lags = []
    for trial in range(args.trials):
        k = trial % n
        before = [s.pulled for s in syncs]
        t0 = time.perf_counter()
        ledgers[k].record(
            "note", at=1e9 + trial, actor="engine", reason=f"lag probe {trial}", campaign=f"c{k}"
        )
        while any(s.pulled == before[j] for j, s in enumerate(syncs) if j != k):
            time.sleep(0.01)
        lags.append(time.perf_counter() - t0)
    print(
        f"sync lag    median {statistics.median(lags):.2f} s, max {max(lags):.2f} s "
        f"(one event until all {n - 1} teammates hold it; rounds every {syncs[0].sync_s:g} s)"
    )
    for s in syncs:
        s.stop()

    with psycopg.connect(url) as c:
        size, rows = c.execute(
            "SELECT pg_total_relation_size('rentwatch.events'), count(*) FROM rentwatch.events"
        ).fetchone()  # type: ignore[misc]
    print(
        f"store size  {size / rows * 1e6 / 2**30:.2f} GiB per million events "
        f"({size / 2**20:.0f} MiB for {rows:,})"
    )

    lg = ledgers[0]

    def fresh(read):  # as a poll after this ledger wrote reads it: not from the record cache
        lg._records.clear()
        return read()

    own = timed(lambda: fresh(lg.rentals))
    team = timed(lambda: fresh(lg.team_rentals))
    quarantine = timed(lambda: lg.teammates_quarantined(0.0))
    print(
        f"poll cost   teammates' quarantines {quarantine * 1e6:.0f} us each poll; the record "
        f"of rentals with their duds {team * 1000:.0f} ms against {own * 1000:.0f} ms alone "
        f"(when a create is in view)"
    )
    for lg in ledgers:
        lg.close()


if __name__ == "__main__":
    main()
