"""The ledger store. Append-only by construction: the class offers appends and reads, and holds
its connection privately; nothing in rentwatch issues UPDATE or DELETE against it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from ..core.errors import RentwatchError
from .event import EVENT_COLUMNS, Event
from .fallback import add_back, write_fallback
from .kinds import EVENT_KINDS
from .private import hold_private_umask, make_private, release_private_umask
from .readonly import QUERY_TIMEOUT_S, QueryResult, QuerySandbox, connect_sandboxed
from .reads import NamedReads
from .schema import MIGRATIONS, SCHEMA_VERSION, V1_TABLES, VIEWS

if TYPE_CHECKING:
    from ..core.offers.track_record import Rental
    from .team.replica import Replica

# the refusal of a ledger another process writes (`run.service.spawn` waits on it to attach)
HELD_ELSEWHERE = "is open in another rentwatch process"
# a write the disk refused ("No space left on device"), or a database that a failed write
# left invalidated: the event waits (fallback.py); any other error is a bug, and raised
DISK_FAILURES = (duckdb.IOException, duckdb.FatalException, OSError)
# the meta key that marks the file's views as made by this rentwatch's `VIEWS` (`_views_mark`)
_VIEWS_KEY = "views"
ACTOR_PREFIXES = ("rule:", "human", "trap", "engine", "reconcile", "watchdog", "market")

# what an outcome inherits from its intent
_CONTEXT = EVENT_COLUMNS[EVENT_COLUMNS.index("campaign") : EVENT_COLUMNS.index("storage_dph") + 1]
_SAMPLE_COLUMNS = (
    "instance_id",
    "ts",
    "util",
    "sm_clock",
    "max_sm_clock",
    "reasons_bits",
    "temp",
    "power_w",
    "mem_used_mb",
)


class LedgerError(RentwatchError):
    title = "ledger error"


class LedgerUnwritable(LedgerError):
    title = "the ledger cannot be written"


def _event(row: Sequence[Any]) -> Event:
    d = dict(zip(EVENT_COLUMNS, row, strict=True))
    d["at"] = d.pop("ts")
    d["detail"] = json.loads(d["detail"]) if d["detail"] else {}
    return Event(**d)


def default_ledger_path() -> Path:
    from platformdirs import user_data_dir

    return Path(user_data_dir("rentwatch")) / "ledger.duckdb"


class Ledger(NamedReads):
    """One DuckDB file. `record` appends a fact; `intent` + `outcome` bracket a marketplace call.
    The named reads the engine asks for (never `where=` text) are `NamedReads`'s (reads.py)."""

    def __init__(
        self,
        path: str | Path,
        *,
        read_only: bool = False,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path)
        self._wall_clock = wall_clock  # the `wall` column: when the line was written, locally
        self.read_only = read_only
        self.__lock = threading.RLock()
        self.__private = False  # holds the private umask (released at close)
        try:
            if read_only and not self.path.exists():
                raise LedgerError(f"no ledger at {self.path}")
            if not read_only and str(path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
                # 0600 for the writer's lifetime: the file and its WAL (made again after each
                # checkpoint) say what an account ran and spent (private.py)
                hold_private_umask()
                self.__private = True
                make_private(self.path)
            self.__con = connect_sandboxed(self.path, read_only=read_only)
        except duckdb.IOException as exc:
            self._release()
            msg = str(exc).splitlines()[0]
            if "lock" in msg.lower():
                raise LedgerError(
                    f"{self.path} {HELD_ELSEWHERE} (DuckDB allows "
                    "one writer); query it from that process's ledger screen"
                ) from None
            raise LedgerError(f"cannot open {self.path}: {msg}") from None
        except OSError as exc:  # a folder that cannot be made, a read-only directory
            self._release()
            raise LedgerError(f"cannot create {self.path}: {exc.strerror or exc}") from None
        if not read_only:
            self._migrate()
        else:
            self._own_views()
        # operator queries get cursors of their own, never this connection (readonly.py)
        self.__sandbox = QuerySandbox(self.__con, self.__lock)
        self.__seq = self._max_seq()
        self._records: dict[str, tuple[int, Any]] = {}  # record reads by the seq they saw
        # events a failed write left unwritten, in order (fallback.py), and why writes fail
        self.__pending: list[list[Any]] = []
        self.unwritable: str | None = None
        self.fallback_note: str | None = None  # where the unwritten events went, or came from
        if not read_only and str(path) != ":memory:":
            try:
                self.fallback_note = add_back(self.path, EVENT_COLUMNS, self.__seq, self._insert)
            except DISK_FAILURES as exc:  # still no room: they wait in their file
                self.fallback_note = f"events an earlier run could not write wait in a file: {exc}"
            self.__seq = self._max_seq()
        self.__replica: Replica | None = None  # the team's events, once a team is joined
        self.__ticked: list[tuple[str, str]] | None = None  # the clock rows last written

    # -- schema ----------------------------------------------------------------------------
    def _migrate(self) -> None:
        con = self.__con
        con.execute(V1_TABLES)
        version = self.schema_version()  # a file without one is version 1, never the latest
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"{self.path} has schema {version}; this rentwatch reads up to {SCHEMA_VERSION}"
            )
        for v in range(version + 1, SCHEMA_VERSION + 1):
            con.execute(MIGRATIONS[v])
        if version != SCHEMA_VERSION:
            con.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
            )
        if version == SCHEMA_VERSION and self._views_are_ours():
            return
        con.execute(VIEWS)
        con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [_VIEWS_KEY, self._views_mark()])

    def _views_mark(self) -> str:
        """This rentwatch's view definitions and the views the file holds now, in one digest:
        a file whose mark is this one holds exactly the views `VIEWS` made, unchanged since."""
        held = self.__con.execute(
            "SELECT view_name, sql FROM duckdb_views() "
            "WHERE NOT internal AND NOT temporary AND database_name = current_database() "
            "AND schema_name = 'main' "
            "ORDER BY view_name"
        ).fetchall()
        return hashlib.sha256(f"{VIEWS}\0{held!r}".encode()).hexdigest()

    def _views_are_ours(self) -> bool:
        """Whether the file's views are this rentwatch's: making them again costs a tenth of a
        second of CPU (each view is bound), at every open of a ledger."""
        with contextlib.suppress(duckdb.Error):
            row = self.__con.execute(
                "SELECT value FROM meta WHERE key = ?", [_VIEWS_KEY]
            ).fetchone()
            return row is not None and row[0] == self._views_mark()
        return False

    def _own_views(self) -> None:
        """Opened read-only, the file holds its last writer's views, maybe an older rentwatch's:
        this rentwatch's own shadow them as temporary views where the file's tables allow."""
        if self._views_are_ours():
            return
        own = VIEWS.replace("CREATE OR REPLACE VIEW", "CREATE OR REPLACE TEMP VIEW")
        with contextlib.suppress(duckdb.Error):
            self.__con.execute(own)

    def schema_version(self) -> int:
        row = self.__con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 1

    def _written(self) -> int | None:
        """The last event this ledger wrote (None: opened read-only, another process writes)."""
        return None if self.read_only else self.__seq

    def stored_through(self) -> int | None:
        """The seq up to which every event is in the file (the events a failed write left
        waiting come after it); None when opened read-only (another process may write)."""
        if self.read_only:
            return None
        with self.__lock:
            return int(self.__pending[0][0]) - 1 if self.__pending else self.__seq

    def _max_seq(self) -> int:
        row = self.__con.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        return int(row[0]) if row else 0

    # -- the moment it computes to ---------------------------------------------------------
    def tick(self, now: float, market: str | None = None) -> None:
        """The market moment the engine has seen up to: the views bill what is still alive up to
        here, so the receipt, the views and the live figures agree at one instant."""
        if self.read_only:
            return
        rows = [("clock", repr(float(now)))]
        if market:  # the clock of that market's campaigns (view campaign_clocks)
            rows.append((f"clock@{market}", rows[0][1]))
        # one statement, one commit: each commit of this file costs milliseconds of CPU, and a
        # tick comes every poll; a tick that changes nothing is not written again, and rows this
        # ledger wrote already are updated (DuckDB's upsert costs twice an update's CPU)
        with self.__lock, self._unless_unwritable():
            if rows == self.__ticked:
                return
            keys = [k for k, _ in rows]
            if self.__ticked is not None and keys == [k for k, _ in self.__ticked]:
                self.__con.execute(
                    f"UPDATE meta SET value = ? WHERE key IN ({', '.join('?' * len(keys))})",
                    [rows[0][1], *keys],
                )
            else:
                self.__con.execute(
                    "INSERT OR REPLACE INTO meta VALUES " + ", ".join(["(?, ?)"] * len(rows)),
                    [v for row in rows for v in row],
                )
            self.__ticked = rows

    @contextlib.contextmanager
    def _unless_unwritable(self) -> Iterator[None]:
        """A write that may be lost (a clock tick, readings): a failure only marks `unwritable`."""
        try:
            yield
        except DISK_FAILURES as exc:
            self.unwritable = self.unwritable or str(exc).splitlines()[0][:300]

    # -- appends ---------------------------------------------------------------------------
    def record(
        self,
        kind: str,
        *,
        at: float,
        actor: str,
        reason: str,
        phase: str = "fact",
        ok: bool | None = None,
        detail: dict[str, Any] | None = None,
        intent_seq: int | None = None,
        **context: Any,
    ) -> int:
        """Append one event; returns its sequence number once it is committed."""
        if self.read_only:
            raise LedgerError("this ledger was opened read-only")
        if kind not in EVENT_KINDS:
            raise LedgerError(f"unknown event kind {kind!r}")
        if not actor.startswith(ACTOR_PREFIXES):
            raise LedgerError(f"unknown actor {actor!r}")
        unknown = set(context) - set(EVENT_COLUMNS)
        if unknown:
            raise LedgerError(f"unknown event fields {sorted(unknown)}")
        with self.__lock:
            self.__seq += 1
            values = {
                "seq": self.__seq,
                "ts": float(at),
                "wall": self._wall_clock(),
                "actor": actor,
                "kind": kind,
                "phase": phase,
                "ok": ok,
                "reason": reason[:2000],
                "detail": json.dumps(detail or {}, default=str),
                "intent_seq": intent_seq,
                **context,
            }
            self.__pending.append([values.get(c) for c in EVENT_COLUMNS])
            self.flush()
            return self.__seq

    def _insert(self, row: list[Any]) -> None:
        self.__con.execute(
            f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(EVENT_COLUMNS))})",
            row,
        )

    def flush(self) -> int:
        """Write what is pending, in order, up to the first write that fails (a full disk:
        kept, and `unwritable` says why); returns how many events are still unwritten."""
        with self.__lock:
            while self.__pending:
                try:
                    self._insert(self.__pending[0])
                except DISK_FAILURES as exc:
                    self.unwritable = self.unwritable or str(exc).splitlines()[0][:300]
                    break
                except duckdb.Error:
                    self.__pending.pop(0)  # a bad row, not the disk: never blocks the rest
                    raise
                self.__pending.pop(0)
            return len(self.__pending)

    def intent(self, kind: str, *, at: float, actor: str, reason: str, **context: Any) -> int:
        return self.record(kind, at=at, actor=actor, reason=reason, phase="intent", **context)

    def outcome(
        self,
        intent_seq: int,
        *,
        at: float,
        ok: bool,
        error: str | None = None,
        detail: dict[str, Any] | None = None,
        **context: Any,
    ) -> int:
        """Close an intent: the same kind and context, ok or the error text."""
        base = self.event(intent_seq)
        if base is None or base.phase != "intent":
            raise LedgerError(f"event {intent_seq} is not an intent")
        ctx = {k: getattr(base, k) for k in _CONTEXT}
        ctx.update({k: v for k, v in context.items() if v is not None})
        merged = base.detail | (detail or {})
        if error:
            merged["error"] = error[:2000]
        return self.record(
            base.kind,
            at=at,
            actor=base.actor,
            phase="outcome",
            ok=ok,
            reason=base.reason if ok else f"{base.reason} - failed: {error}",
            detail=merged,
            intent_seq=intent_seq,
            **ctx,
        )

    def add_samples(self, rows: Sequence[dict[str, Any]]) -> None:
        if not rows:
            return
        with self.__lock, self._unless_unwritable():
            self.__con.executemany(
                f"INSERT INTO samples VALUES ({', '.join('?' * len(_SAMPLE_COLUMNS))})",
                [[r.get(c) for c in _SAMPLE_COLUMNS] for r in rows],
            )

    # -- reads -----------------------------------------------------------------------------
    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.__lock:
            return [tuple(r) for r in self.__con.execute(sql, list(params)).fetchall()]

    def event(self, seq: int) -> Event | None:
        rows = self.events(where="seq = ?", params=[seq])
        unwritten = [_event(r) for r in self.__pending if r[0] == seq]
        return rows[0] if rows else unwritten[0] if unwritten else None

    def events(self, where: str = "true", params: Sequence[Any] = ()) -> list[Event]:
        sql = f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE {where} ORDER BY seq"
        return [_event(r) for r in self._rows(sql, params)]

    def query(
        self,
        sql: str,
        limit: int = 10_000,
        offset: int = 0,
        tag: str | None = None,
        timeout_s: float = QUERY_TIMEOUT_S,
        team: bool = False,
    ) -> QueryResult:
        """A read-only query (one SELECT) in the sandbox; anything else raises QueryRefused. `tag`:
        `interrupt(tag)` cancels it alone. With `team`, the team's union first."""
        if team:
            sandbox = QuerySandbox(self.__con, self.__lock, search_path="team,main")
            return sandbox.run(sql, limit, offset, tag, timeout_s)
        return self.__sandbox.run(sql, limit, offset, tag, timeout_s)

    def queries_running(self) -> list[str]:
        return self.__sandbox.running()

    def receipt(self, campaign: str | None = None) -> list[dict[str, Any]]:
        from .receipt import compute_receipt

        with self.__lock:
            return compute_receipt(self.__con, campaign)

    def instance_rows(self, campaign: str | None = None) -> list[dict[str, Any]]:
        sql = (
            "SELECT * FROM instances"
            + (" WHERE campaign = ?" if campaign else "")
            + " ORDER BY instance_id"
        )
        with self.__lock:
            cur = self.__con.execute(sql, [campaign] if campaign else [])
            cols = [d[0] for d in cur.description or []]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def raw_events(self, after: int, limit: int) -> list[tuple[Any, ...]]:
        """Events after seq `after`, as stored (detail as its JSON text), in the team chain's
        column order: what the team sync ships."""
        return self._rows(
            f"SELECT {', '.join(EVENT_COLUMNS)} FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            [int(after), int(limit)],
        )

    def replica(self) -> Replica:
        """The team's events in this file (team/replica.py), made on first use."""
        if self.__replica is None:
            from .team.replica import Replica

            self.__replica = Replica(self.__con, self.__lock)
        return self.__replica

    def team_rentals(self) -> list[Rental]:
        """`rentals`, with each of the teammates' duds once this ledger joined a team (their
        successes never count: a teammate can lower a machine's odds, never raise them)."""
        own = self.rentals()
        return own if self.__replica is None else [*own, *self.__replica.evidence.duds]

    def teammates_quarantined(self, now: float) -> dict[int, str]:
        """Machines a teammate quarantined, still in force at `now` ({} without a team)."""
        if self.__replica is None:
            return {}
        return self.__replica.evidence.quarantined(now)

    def interrupt(self, tag: str | None = None) -> bool:
        """Cancel the queries running on this ledger (all, or `tag`'s); whether any was running."""
        return self.__sandbox.interrupt(tag)

    def close(self) -> None:
        with self.__lock:
            if self.flush():  # what the disk never took goes beside the ledger
                self.fallback_note = write_fallback(self.path, EVENT_COLUMNS, self.__pending)
                self.__pending.clear()
            if self.__replica is not None:
                self.__replica.close()
            with contextlib.suppress(duckdb.Error):
                self.__con.close()
            self._release()

    def _release(self) -> None:
        if self.__private:
            self.__private = False
            release_private_umask()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
