"""The team store: a team's controllers share their ledgers' events through one PostgreSQL server,
while each keeps its own DuckDB ledger as its source of truth and its outbox."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .config import TeamConfig, TeamConfigError

if TYPE_CHECKING:
    from .store import StoreUnavailable, TeamStore

__all__ = ["StoreUnavailable", "TeamConfig", "TeamConfigError", "TeamStore"]


def __getattr__(name: str) -> Any:
    """The store on first use: psycopg loads only for a command that speaks to the server."""
    if name not in ("StoreUnavailable", "TeamStore"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(".store", __name__), name)
