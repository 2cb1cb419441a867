"""The team's events inside the local DuckDB ledger, so every read keeps DuckDB's SQL.

`team_events` holds what the sync pulled from the store: the teammates' events, each ledger's
in order, each event once. The `team` schema holds the ledger's own views again (`instances`,
`hosts`, `quarantine`, ...) over `team.events`, the union of this ledger's events and its
teammates' on the same market, with an `operator` column. The engine reads its record of
machines, GPU models and quarantines with the teammates' duds and quarantines added when the
controller is part of a team (`Ledger.memory()`); everything that acts on rentals (holdings, recovery, the receipt) keeps
reading this ledger's own events.

In the union each event keeps a unique `seq`: a teammate's is its ledger's number in this
replica times 2^40 plus its own seq (the order within a ledger holds; across ledgers, seq
orders nothing). A teammate's events count only for the campaigns it ran on this
controller's market (their `campaign_start` names it): a machine id of another market (a
teammate's demo) is another machine."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..reads import NamedReads
from ..schema import VIEWS
from .chain import FIELDS

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
    hash VARCHAR NOT NULL);
CREATE SCHEMA IF NOT EXISTS team;
"""

# the union: this ledger's events (its operator's) and its teammates' on the same market
UNION_VIEW = """
CREATE OR REPLACE VIEW team.events AS
WITH me AS (
  SELECT coalesce((SELECT value FROM main.meta WHERE key = 'team_operator'), '') AS operator,
         rtrim(coalesce((SELECT value FROM main.meta WHERE key = 'team_market'), ''), '/')
           AS market
), markets AS (
  SELECT ledger_id, coalesce(campaign, '') AS campaign,
         rtrim(coalesce(arg_max(detail->>'market', seq), ''), '/') AS market
  FROM main.team_events WHERE kind = 'campaign_start' GROUP BY ALL
)
SELECT e.*, me.operator FROM main.events e, me
UNION ALL BY NAME
SELECT t.seq, t.ts, t.wall, t.campaign, t.instance_id, t.machine_id, t.host_id, t.offer_id,
       t.gpu_name, t.gpu_dph, t.storage_dph, t.actor, t.kind, t.phase, t.ok, t.reason, t.detail,
       t.intent_seq, t.operator
FROM main.team_events t
LEFT JOIN markets m ON m.ledger_id = t.ledger_id AND m.campaign = coalesce(t.campaign, '')
WHERE {market_filter};
"""
SAME_MARKET = "m.market = (SELECT market FROM me)"

_INSERT = (
    "INSERT OR IGNORE INTO team_events (seq, ledger_id, source_seq, operator, "
    + ", ".join(f for f in FIELDS if f != "seq")
    + ", hash) VALUES ("
    + ", ".join(["?"] * (len(FIELDS) + 4))
    + ")"
)


class Replica:
    """The team's side of one ledger file; `con` and `lock` are the ledger's own."""

    def __init__(self, con: duckdb.DuckDBPyConnection, lock: threading.RLock) -> None:
        self._con = con
        self._lock = lock
        self._reads: TeamReads | None = None
        with lock:
            con.execute(TABLES)
            row = con.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
            if row is None:
                con.execute("INSERT INTO meta VALUES ('ledger_id', ?)", [uuid.uuid4().hex])

    @property
    def ledger_id(self) -> str:
        """This ledger's name in the store: made once, kept in its `meta`."""
        with self._lock:
            row = self._con.execute("SELECT value FROM meta WHERE key = 'ledger_id'").fetchone()
        assert row is not None
        return str(row[0])

    def join(self, operator: str, market: str | None, every_market: bool = False) -> None:
        """Whose this ledger's events are and which market its teammates' must share (with
        `every_market`, none: the whole store, as `rentwatch ledger --team` reads it); the
        `team` views made (again, so this rentwatch's own views are the ones read)."""
        with self._lock:
            for key, value in (("team_operator", operator), ("team_market", market or "")):
                self._con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])
            self._con.execute(
                UNION_VIEW.format(market_filter="true" if every_market else SAME_MARKET)
            )
            cur = self._con.cursor()
            try:
                cur.execute("SET search_path = 'team,main'")
                cur.execute(VIEWS)
            finally:
                cur.close()

    def cursors(self) -> dict[str, int]:
        """Each teammate's ledger -> the last of its events held here."""
        with self._lock:
            rows = self._con.execute(
                "SELECT l.ledger_id, coalesce(max(e.source_seq), 0) FROM team_ledgers l "
                "LEFT JOIN team_events e USING (ledger_id) GROUP BY l.ledger_id"
            ).fetchall()
        return {str(a): int(b) for a, b in rows}

    def add(self, ledger_id: str, operator: str, rows: Sequence[Sequence[Any]]) -> int:
        """Append a teammate ledger's events pulled in order (fields in `FIELDS` order, then
        the hash); those already here are skipped. Returns how many were new."""
        with self._lock:
            got = self._con.execute(
                "SELECT no FROM team_ledgers WHERE ledger_id = ?", [ledger_id]
            ).fetchone()
            if got is None:
                nxt = self._con.execute("SELECT coalesce(max(no), 0) + 1 FROM team_ledgers")
                no = int(nxt.fetchone()[0])  # type: ignore[index]
                self._con.execute(
                    "INSERT INTO team_ledgers VALUES (?, ?, ?)", [no, ledger_id, operator]
                )
            else:
                no = int(got[0])
            if not rows:
                return 0
            before = self._count()
            base = no * SEQ_SPAN
            values = []
            for r in rows:
                fields = dict(zip(FIELDS, r, strict=False))
                seq = int(fields.pop("seq"))
                intent = fields.pop("intent_seq")
                values.append(
                    [
                        base + seq,
                        ledger_id,
                        seq,
                        operator,
                        *fields.values(),
                        None if intent is None else base + int(intent),
                        r[len(FIELDS)],
                    ]
                )
            self._con.executemany(_INSERT, values)
            return self._count() - before

    def _count(self) -> int:
        row = self._con.execute("SELECT count(*) FROM team_events").fetchone()
        return int(row[0]) if row else 0

    def reads(self) -> TeamReads:
        """The engine's named reads over the union (made once)."""
        if self._reads is None:
            with self._lock:
                cur = self._con.cursor()
                cur.execute("SET search_path = 'team,main'")
            self._reads = TeamReads(cur, self._lock)
        return self._reads

    def close(self) -> None:
        if self._reads is not None:
            self._reads.close()


# teammates' rentals in the union (their creates), less those that say nothing of the host: the
# campaign's fault or cancelled (as `NamedReads.machine_record` leaves them out)
_THEIRS = f"""instance_id IN (SELECT instance_id FROM events WHERE kind = 'create'
    AND seq >= {SEQ_SPAN} AND instance_id IS NOT NULL)
  AND instance_id NOT IN (SELECT instance_id FROM events WHERE kind = 'abandon'
    AND instance_id IS NOT NULL
    AND (detail->>'blame' IS NOT NULL OR detail->>'class' = 'cancelled'))"""


class TeamReads:
    """The teammates' evidence, read on the union (the `team` schema). It can only count
    against a machine or a model: their duds and quarantines, never their successes or
    speeds, so a teammate's ledger can lower a machine's odds and never raise them (nor make
    one of this controller's hosts look slow enough to replace)."""

    def __init__(self, cur: duckdb.DuckDBPyConnection, lock: threading.RLock) -> None:
        self._cur = cur
        self._lock = lock

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return [tuple(r) for r in self._cur.execute(sql, list(params)).fetchall()]

    def machine_duds(self) -> dict[int, tuple[int, float]]:
        """Machine id -> (teammates' duds there, their mean USD)."""
        rows = self._rows(
            "SELECT machine_id, count(*), avg(total_usd) FROM instances "
            f"WHERE dud AND machine_id IS NOT NULL AND {_THEIRS} GROUP BY machine_id"
        )
        return {int(m): (int(n), float(u or 0)) for m, n, u in rows}

    def model_duds(self) -> dict[str, tuple[int, float]]:
        """GPU model -> (teammates' duds of that model, minutes they lived in all)."""
        rows = self._rows(
            "SELECT gpu_name, count(*), coalesce(sum(lifetime_min), 0) FROM instances "
            f"WHERE dud AND gpu_name IS NOT NULL AND {_THEIRS} GROUP BY gpu_name"
        )
        return {str(g): (int(n), float(m or 0)) for g, n, m in rows}

    def teammates_quarantined(self, now: float) -> dict[int, str]:
        """Machine id -> who and why, for each quarantine a teammate's controller put in force
        on this market and that has not lapsed by `now` (one without an end lasts)."""
        rows = self._rows(
            "SELECT machine_id, arg_max(reason, seq), arg_max(operator, seq), "
            "arg_max(TRY_CAST(detail->>'until' AS DOUBLE), seq) FROM events "
            "WHERE kind = 'quarantine' AND machine_id IS NOT NULL AND seq >= ? "
            "GROUP BY machine_id",
            [SEQ_SPAN],
        )
        return {int(m): f"{op}: {r}" for m, r, op, until in rows if until is None or until > now}

    def close(self) -> None:
        with self._lock:
            try:
                self._cur.close()
            except Exception:  # already closed with its connection
                pass


class TeamMemory:
    """A ledger's own record of machines and GPU models with its teammates' duds added: what
    the ranking and the odds read when the controller is part of a team."""

    def __init__(self, own: NamedReads, team: TeamReads) -> None:
        self.own = own
        self.team = team

    def machine_record(self) -> dict[int, tuple[int, int, float]]:
        """As `NamedReads.machine_record`: (verified, duds, mean USD of a dud) per machine."""
        out = dict(self.own.machine_record())
        for m, (n, usd) in self.team.machine_duds().items():
            good, bad, mean = out.get(m, (0, 0, 0.0))
            out[m] = (good, bad + n, (bad * mean + n * usd) / (bad + n))
        return out

    def model_record(self) -> dict[str, tuple[int, int, float]]:
        """As `NamedReads.model_record`: (delivered, duds, minutes its duds lived) per model."""
        out = dict(self.own.model_record())
        for g, (n, minutes) in self.team.model_duds().items():
            good, bad, lived = out.get(g, (0, 0, 0.0))
            out[g] = (good, bad + n, lived + minutes)
        return out
