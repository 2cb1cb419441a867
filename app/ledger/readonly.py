"""The query sandbox: every operator query runs here, never on the controller's write connection.

Three walls: DuckDB's parser admits one plain `SELECT`/`WITH`/`VALUES` (or a plain `EXPLAIN`;
`EXPLAIN ANALYZE` runs its statement); the instance opens with `SANDBOX_CONFIG` (no external
access, no extensions, the configuration locked); and each statement runs in `BEGIN TRANSACTION
READ ONLY` on a cursor of its own. Bounds: memory and threads capped, `QUERY_TIMEOUT_S`, pages of
`MAX_ROW_LIMIT` rows and `MAX_PAGE_BYTES`, fetched `FETCH_ROWS` at a time.

A cursor, not a second connection: DuckDB refuses a read-only `connect` while the controller
holds the file for writing, and a cursor sees every committed event with its own transaction and
interrupt. See https://duckdb.org/docs/stable/operations_manual/securing_duckdb/overview and
https://duckdb.org/docs/stable/configuration/overview."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ..core.errors import RentwatchError

DEFAULT_ROW_LIMIT = 10_000
MAX_ROW_LIMIT = 100_000  # rows in one page, whatever the caller asked for
MAX_PAGE_BYTES = 64 << 20  # text and blobs in one page
# rows brought into Python at a time, so that the byte bound stops a page of huge rows before it
# is all held (Python's objects are outside DuckDB's memory_limit)
FETCH_ROWS = 1_000
QUERY_TIMEOUT_S = 20.0  # wall seconds a query may run before it is interrupted
QUERY_MEMORY_LIMIT = "1GB"  # the whole instance (the controller's own writes need little)
QUERY_THREADS = 1  # one core at most: the controller (and its machine) keeps the rest
SANDBOX_CONFIG: dict[str, Any] = {
    "memory_limit": QUERY_MEMORY_LIMIT,
    "threads": QUERY_THREADS,
    "max_temp_directory_size": "0KB",  # past the memory limit a query fails, nothing spills
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "allow_community_extensions": False,
    "allow_unsigned_extensions": False,
    "lock_configuration": True,
}
_EXPLAIN_OPTIONS_REFUSED = {"ANALYZE", "ANALYSE"}
# table functions that act on the database file from inside a SELECT (a checkpoint rewrites it)
_FUNCTIONS_REFUSED = {"checkpoint", "force_checkpoint"}


class QueryRefused(RentwatchError):
    title = "query refused"


class QueryFailed(RentwatchError):
    title = "query failed"


class QueryTooBig(QueryFailed):
    title = "query stopped"


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than the limit
    offset: int = 0  # the first row's index in the whole answer (paging)

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def _text_bytes(rows: list[Any]) -> int:
    """The length of the text and blobs in `rows`: what the page's byte bound counts."""
    return sum(len(v) for r in rows for v in r if isinstance(v, str | bytes))


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:500]


def _tokens(sql: str) -> list[tuple[int, str]]:
    """The statement's tokens and where each starts, comments dropped (DuckDB's own tokenizer)."""
    marks = duckdb.tokenize(sql)
    ends = [start for start, _ in marks[1:]] + [len(sql)]
    return [
        (start, sql[start:end].strip())
        for (start, kind), end in zip(marks, ends, strict=True)
        if kind != duckdb.token_type.comment
    ]


def _explained(sql: str) -> str:
    """The statement an EXPLAIN explains; refuses EXPLAIN ANALYZE in any spelling."""
    toks = _tokens(sql)
    words = [t.upper() for _, t in toks]
    if words[:1] != ["EXPLAIN"]:
        raise QueryRefused("cannot read this EXPLAIN")
    i, depth = 1, 0  # the explained statement's first token, past any options
    if words[1:2] == ["("]:
        for j, w in enumerate(words[1:], 2):
            depth += (w == "(") - (w == ")")
            if depth == 0:
                i = j
                break
        else:
            raise QueryRefused("cannot read this EXPLAIN's options")
    if _EXPLAIN_OPTIONS_REFUSED & set(words[1 : i + 1]):
        raise QueryRefused("EXPLAIN ANALYZE runs its statement: refused; use plain EXPLAIN")
    if i >= len(toks):
        raise QueryRefused("EXPLAIN of nothing")
    # the rest, parsed again by DuckDB, must be one plain read
    return sql[toks[i][0] :]


def check_read_only(sql: str) -> str:
    """Return the single plain read statement in `sql`, or raise QueryRefused saying why."""
    if "\x00" in sql:
        raise QueryRefused("a NUL character in the query")
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryFailed(_first_line(exc)) from None
    if not statements:
        raise QueryRefused("no statement to run")
    if len(statements) > 1:
        raise QueryRefused(f"one statement at a time ({len(statements)} given)")
    st = statements[0]
    toks = [t.lower().strip('"') for _, t in _tokens(st.query)]
    for name, nxt in zip(toks, toks[1:], strict=False):
        if name in _FUNCTIONS_REFUSED and nxt == "(":
            raise QueryRefused(f"{name}() changes the ledger file: refused")
    if st.type == duckdb.StatementType.EXPLAIN:
        try:
            inner = duckdb.extract_statements(_explained(st.query))
        except duckdb.Error as exc:
            raise QueryFailed(_first_line(exc)) from None
        if len(inner) != 1 or inner[0].type != duckdb.StatementType.SELECT:
            raise QueryRefused("EXPLAIN only of one SELECT here")
        return sql
    if st.type != duckdb.StatementType.SELECT:
        kind = str(st.type).split(".")[-1]
        raise QueryRefused(f"the ledger is read-only here: {kind} statements are refused")
    return sql


def connect_sandboxed(path: str | Path, *, read_only: bool) -> duckdb.DuckDBPyConnection:
    """A DuckDB instance on `path` with the sandbox's settings (the controller's included: a
    setting like external access is per instance, and the controller needs none of it)."""
    return duckdb.connect(str(path), read_only=read_only, config=dict(SANDBOX_CONFIG))


class QuerySandbox:
    """Runs operator queries on cursors of `con` (made under `lock`), one read-only transaction
    each; no statement is executed on `con` itself."""

    def __init__(
        self, con: duckdb.DuckDBPyConnection, lock: threading.RLock, search_path: str | None = None
    ) -> None:
        self._con = con
        self._lock = lock
        self._search_path = search_path  # "team,main": the team store's union (ledger/team)
        self._running: dict[duckdb.DuckDBPyConnection, str | None] = {}  # cursor -> its tag
        self._mu = threading.Lock()

    def run(
        self,
        sql: str,
        limit: int = DEFAULT_ROW_LIMIT,
        offset: int = 0,
        tag: str | None = None,
        timeout_s: float = QUERY_TIMEOUT_S,
    ) -> QueryResult:
        """One page of the answer from `offset`, and whether more exist. `interrupt(tag)` cancels it
        alone; past `timeout_s` it is interrupted (`QueryTooBig`)."""
        check_read_only(sql)
        limit = min(max(0, int(limit)), MAX_ROW_LIMIT)
        offset = max(0, int(offset))
        with self._lock:
            cur = self._con.cursor()
        with self._mu:
            self._running[cur] = tag
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            with contextlib.suppress(duckdb.Error):
                cur.interrupt()

        timer = threading.Timer(timeout_s, expire)
        timer.daemon = True
        timer.start()
        try:
            if self._search_path:
                cur.execute("SET search_path = ?", [self._search_path])
            cur.execute("BEGIN TRANSACTION READ ONLY")
            try:
                cur.execute(sql)
                columns = [d[0] for d in cur.description or []]
                skipped = 0
                while skipped < offset:
                    chunk = cur.fetchmany(min(offset - skipped, FETCH_ROWS))
                    if not chunk:
                        break
                    skipped += len(chunk)
                rows: list[Any] = []
                size = 0
                while len(rows) <= limit:  # one more row tells whether there were more
                    chunk = cur.fetchmany(min(limit + 1 - len(rows), FETCH_ROWS))
                    if not chunk:
                        break
                    size += _text_bytes(chunk[: limit - len(rows)])
                    rows.extend(chunk)
                    if size > MAX_PAGE_BYTES:
                        raise QueryTooBig(
                            f"the answer holds at least {size >> 20} MB of text, over the page's "
                            f"{MAX_PAGE_BYTES >> 20} MB: stopped (fewer rows, or shorter columns)"
                        )
            finally:
                with contextlib.suppress(duckdb.Error):  # an interrupted one is already gone
                    cur.execute("ROLLBACK")
        except duckdb.OutOfMemoryException:
            raise QueryTooBig(
                f"the query needed more than the sandbox's {QUERY_MEMORY_LIMIT} of memory: "
                "stopped (narrow it, aggregate less, or page it)"
            ) from None
        except duckdb.Error as exc:
            if expired.is_set():
                raise QueryTooBig(
                    f"the query ran past {timeout_s:g} s: stopped (narrow it, or page it)"
                ) from None
            raise QueryFailed(_first_line(exc)) from None
        finally:
            timer.cancel()
            with self._mu:
                self._running.pop(cur, None)
            cur.close()
        page = [tuple(r) for r in rows[:limit]]
        return QueryResult(columns, page, len(rows) > limit, offset)

    def running(self) -> list[str]:
        """The tags of the tagged queries running now."""
        with self._mu:
            return sorted(t for t in self._running.values() if t is not None)

    def interrupt(self, tag: str | None = None) -> bool:
        """Cancel the queries running now (all, or `tag`'s) from another thread; whether any ran."""
        with self._mu:
            running = [c for c, t in self._running.items() if tag is None or t == tag]
        for cur in running:
            with contextlib.suppress(duckdb.Error):
                cur.interrupt()
        return bool(running)
