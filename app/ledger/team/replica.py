"""The team's events inside the local DuckDB ledger, so every read keeps DuckDB's SQL.

`team_events` holds the teammates' events; the `team` schema holds the ledger's views again over
the union, with an `operator` column. The engine's record of machines counts the teammates' duds
and quarantines; everything that acts on rentals reads this ledger's own events. A teammate's seq
is its ledger's number times 2^40 plus its own, and its events count only for campaigns on this
controller's market."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core.errors import ConfigError
from ...core.offers.track_record import Rental
from ..event import EVENT_COLUMNS
from ..records import RENTAL_RECORD_SQL
from ..schema import VIEWS

if TYPE_CHECKING:
    import duckdb

SEQ_SPAN = 1 << 40  # a teammate's seq in the union: its ledger's number x 2^40 + its own seq

TABLES = """
CREATE TABLE IF NOT EXISTS team_ledgers (
    no INTEGER PRIMARY KEY, ledger_id VARCHAR UNIQUE NOT NULL, operator VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS team_events (
    seq BIGINT PRIMARY KEY, ledger_id VARCHAR NOT NULL, source_seq BIGINT NOT NULL,
    operator VARCHAR NOT NULL, ts DOUBLE NOT NULL, wall DOUBLE, campaign VARCHAR,
    instance_id BIGINT, machine_id BIGINT, host_id BIGINT, offer_id BIGINT, gpu_name VARCHAR,
    gpu_dph DOUBLE, storage_dph DOUBLE, actor VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    phase VARCHAR NOT NULL, ok BOOLEAN, reason VARCHAR, detail JSON, intent_seq BIGINT,
    hash VARCHAR NOT NULL, market VARCHAR NOT NULL);
CREATE SCHEMA IF NOT EXISTS team;
CREATE SCHEMA IF NOT EXISTS mates;
"""

# the union: this ledger's events (its operator's) and its teammates' on the same market
# a teammate's event carries the market its campaign started on (`market`, set as it is
# added), so keeping a teammate's events to this controller's market is a plain filter
_COLS = ", ".join(f"t.{c}" for c in (*EVENT_COLUMNS, "operator"))
SAME_MARKET = """t.market = rtrim(coalesce(
    (SELECT value FROM main.meta WHERE key = 'team_market'), ''), '/')"""
UNION_VIEW = f"""
CREATE OR REPLACE VIEW team.events AS
SELECT e.*, coalesce((SELECT value FROM main.meta WHERE key = 'team_operator'), '') AS operator
FROM main.events e
UNION ALL BY NAME
SELECT {_COLS} FROM main.team_events t WHERE {{market_filter}};
"""

# the teammates' events alone (on this market): what their evidence is read from, apart from
# this ledger's, so computing it costs what their events cost (the empty first branch gives it
# every column `events` has, so the views made over it stand whatever a later schema adds)
MATES_VIEW = f"""
CREATE OR REPLACE VIEW mates.events AS
SELECT e.*, NULL::VARCHAR AS operator FROM main.events e WHERE false
UNION ALL BY NAME
SELECT {_COLS} FROM main.team_events t WHERE {SAME_MARKET};
"""


# a pulled batch, bound one list per column (`{pulled}`), added in one statement: its seqs moved
# into this ledger's number's span; a `detail` that is not a JSON object read as `{}` (any
# controller role may write the store: one bad row costs its detail, not the pull); each event on
# the market its campaign last started on, in this batch or an earlier one
_ADD = """
INSERT OR IGNORE INTO team_events BY NAME
WITH pulled AS (SELECT {pulled}), b AS (
  SELECT * REPLACE (CASE WHEN json_valid(detail) AND json_type(detail) = 'OBJECT' THEN detail
                         WHEN detail IS NOT NULL THEN '{{}}' END AS detail)
  FROM pulled)
SELECT * REPLACE ($base + seq AS seq, $base + intent_seq AS intent_seq),
       seq AS source_seq, $ledger AS ledger_id, $operator AS operator,
       coalesce(
         last_value(CASE WHEN kind = 'campaign_start' THEN rtrim(coalesce(detail->>'market', ''), '/')
                    END IGNORE NULLS)
           OVER (PARTITION BY coalesce(campaign, '') ORDER BY seq ROWS UNBOUNDED PRECEDING),
         (SELECT arg_max(s.market, s.seq) FROM team_events s
          WHERE s.ledger_id = $ledger AND s.kind = 'campaign_start'
            AND coalesce(s.campaign, '') = coalesce(b.campaign, '')),
         '') AS market
FROM b
"""


@dataclass(frozen=True)
class TeamEvidence:
    """What the teammates' events say against machines and models: only ever against one, so a
    teammate's ledger lowers a machine's odds and never raises them."""

    # (machine, "operator: reason", until): until None lasts
    quarantines: tuple[tuple[int, str, float | None], ...] = ()
    # their duds one by one, dated, for the faded record (core/offers/track_record.py)
    duds: tuple[Rental, ...] = ()

    def quarantined(self, now: float) -> dict[int, str]:
        """Machine id -> who and why, for each teammate's quarantine in force at `now`."""
        return {m: why for m, why, until in self.quarantines if until is None or until > now}


class Replica:
    """The team's side of one ledger file; `con` and `lock` are the ledger's own. The sync's thread
    writes it and reads the evidence on a cursor of its own; the engine reads `evidence`."""

    def __init__(self, con: duckdb.DuckDBPyConnection, lock: threading.RLock) -> None:
        self._con = con
        self._lock = lock
        self._cur: duckdb.DuckDBPyConnection | None = None
        self.evidence = TeamEvidence()
        with lock:
            (name,) = con.execute("SELECT current_database()").fetchone() or ("",)
            if name in ("team", "mates"):  # DuckDB names a file's catalog after its stem
                raise ConfigError(
                    f"a ledger file named {name}.duckdb cannot join a team: `{name}` is the name "
                    f"of the ledger's team views (docs/ledger.md); rename the file, e.g. "
                    f"{name}-ledger.duckdb"
                )
            con.execute(TABLES)
            typed = dict(
                con.execute(
                    "SELECT column_name, data_type FROM duckdb_columns() WHERE table_name = "
                    "'team_events' AND schema_name = 'main' AND database_name = current_database()"
                ).fetchall()
            )
            # this ledger's name in the store: made once, kept in its `meta`
            row = con.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
            self.ledger_id = str(row[0]) if row else uuid.uuid4().hex
            if row is None:
                con.execute("INSERT INTO meta VALUES ('ledger_id', ?)", [self.ledger_id])
        # one list per column, unnested in one statement (DuckDB binds a list at once; row by
        # row, a pull of thousands took seconds); `detail` as text, checked in the statement
        typed["detail"] = "VARCHAR"
        self._names = (*EVENT_COLUMNS, "hash")
        self._insert = _ADD.format(
            pulled=", ".join(f"unnest(${c}::{typed[c]}[]) AS {c}" for c in self._names)
        )

    def join(self, operator: str, market: str | None, every_market: bool = False) -> None:
        """Whose this ledger's events are and which market its teammates' must share (with
        `every_market`, none); the `team` and `mates` views made."""
        with self._lock:
            for key, value in (("team_operator", operator), ("team_market", market or "")):
                self._con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])
            self._con.execute(
                UNION_VIEW.format(market_filter="true" if every_market else SAME_MARKET)
            )
            self._con.execute(MATES_VIEW)
            for schema in ("team", "mates"):
                cur = self._con.cursor()
                try:
                    cur.execute(f"SET search_path = '{schema},main'")
                    cur.execute(VIEWS)
                finally:
                    cur.close()
        self.refresh()

    def cursors(self) -> dict[str, int]:
        """Each teammate's ledger -> the last of its events held here."""
        with self._lock:
            rows = self._con.execute(
                "SELECT l.ledger_id, coalesce(max(e.source_seq), 0) FROM team_ledgers l "
                "LEFT JOIN team_events e USING (ledger_id) GROUP BY l.ledger_id"
            ).fetchall()
        return {str(a): int(b) for a, b in rows}

    def add(self, ledger_id: str, operator: str, rows: Sequence[Sequence[Any]]) -> int:
        """Append a teammate ledger's events pulled in order (fields in `EVENT_COLUMNS` order, then
        the hash); those already here are skipped. Returns how many were new."""
        with self._lock:
            self._con.execute(
                "INSERT OR IGNORE INTO team_ledgers "
                "SELECT coalesce(max(no), 0) + 1, ?, ? FROM team_ledgers",
                [ledger_id, operator],
            )
            got = self._con.execute(
                "SELECT no FROM team_ledgers WHERE ledger_id = ?", [ledger_id]
            ).fetchone()
            no = int(got[0])  # type: ignore[index]
            if not rows:
                return 0
            columns = dict(zip(self._names, map(list, zip(*rows, strict=True)), strict=True))
            binds = {**columns, "base": no * SEQ_SPAN, "ledger": ledger_id, "operator": operator}
            added = self._con.execute(self._insert, binds).fetchone()
            return int(added[0]) if added else 0

    def refresh(self, records: bool = True) -> TeamEvidence:
        """Read the teammates' evidence again: their quarantines, and with `records` their duds,
        read as this ledger's rentals are (a cost that grows, so the sync spaces it out)."""
        if self._cur is None:
            with self._lock:
                self._cur = self._con.cursor()
            self._cur.execute("SET search_path = 'mates,main'")
        cur = self._cur
        quarantines = cur.execute(
            "SELECT machine_id, arg_max(operator || ': ' || reason, seq), "
            "arg_max(TRY_CAST(detail->>'until' AS DOUBLE), seq) FROM events "
            "WHERE kind = 'quarantine' AND machine_id IS NOT NULL GROUP BY machine_id"
        ).fetchall()
        duds = self.evidence.duds
        if records:
            rentals = [Rental(*r) for r in cur.execute(RENTAL_RECORD_SQL).fetchall()]
            duds = tuple(r for r in rentals if r.dud)
        self.evidence = TeamEvidence(
            tuple((int(m), str(why), None if u is None else float(u)) for m, why, u in quarantines),
            duds,
        )
        return self.evidence

    def close(self) -> None:
        if self._cur is not None:
            with self._lock, contextlib.suppress(Exception):  # already closed with the connection
                self._cur.close()
