"""Read-only SQL over the ledger: DuckDB's own parser decides what a statement is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import duckdb

from ..core.errors import RentwatchError

ALLOWED = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}
DEFAULT_ROW_LIMIT = 10_000


class QueryRefused(RentwatchError):
    title = "query refused"


class QueryFailed(RentwatchError):
    title = "query failed"


@dataclass(frozen=True)
class QueryResult:
    columns: list[str]
    rows: list[tuple[Any, ...]]
    truncated: bool  # more rows existed than the limit

    def as_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]


def check_read_only(sql: str) -> str:
    """Return the single read statement in `sql`, or raise QueryRefused saying why."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryFailed(str(exc).splitlines()[0]) from None
    if not statements:
        raise QueryRefused("no statement to run")
    if len(statements) > 1:
        raise QueryRefused(f"one statement at a time ({len(statements)} given)")
    st = statements[0]
    if st.type not in ALLOWED:
        kind = str(st.type).split(".")[-1]
        raise QueryRefused(f"the ledger is read-only here: {kind} statements are refused")
    return sql


def run_read_only(
    con: duckdb.DuckDBPyConnection, sql: str, limit: int = DEFAULT_ROW_LIMIT
) -> QueryResult:
    check_read_only(sql)
    try:
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description or []]
        rows = cur.fetchmany(limit + 1)  # one more row tells whether there were more
    except duckdb.Error as exc:
        raise QueryFailed(str(exc).splitlines()[0][:500]) from None
    return QueryResult(columns, [tuple(r) for r in rows[:limit]], len(rows) > limit)
