"""The team store: a team's controllers share their ledgers' events through one PostgreSQL server,
while each keeps its own DuckDB ledger as its source of truth and its outbox."""

from .config import TeamConfig, TeamConfigError
from .store import StoreUnavailable, TeamStore

__all__ = ["StoreUnavailable", "TeamConfig", "TeamConfigError", "TeamStore"]
