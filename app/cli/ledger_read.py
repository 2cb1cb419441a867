"""Reading a ledger from a command: through the controller that holds the file when one runs (DuckDB
lets no other process open it then), else read-only from the file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..ledger.readonly import QueryResult


def query(path: str | Path, sql: str, limit: int) -> QueryResult:
    """One read-only SELECT on the ledger at `path`, up to `limit` rows."""
    from ..ledger import Ledger
    from .controllers import controller_for_ledger

    remote = controller_for_ledger(path)
    if remote is None:
        with Ledger(path, read_only=True) as ledger:
            return ledger.query(sql, limit)
    with remote:
        return remote.query_all(sql, limit)


def select(path: str | Path, sql: str, limit: int = 100_000) -> list[dict[str, Any]]:
    """The rows of one read-only SELECT on the ledger at `path`, as dicts."""
    return query(path, sql, limit).as_dicts()
