"""The team store: a team's controllers share their ledgers' events through one PostgreSQL
server, while each keeps its own DuckDB ledger as its source of truth and its outbox.

- `config.py`: the store's URL, the operator's name, the password (never on a command line)
- `chain.py`: each ledger's events as a hash chain, and the check that names an edited or
  missing event
- `migrations.py`: the store's versioned schema and its two roles (owner, controller)
- `store.py`: the store over psycopg: ship, pull, heartbeats, the chains' rows
- `replica.py`: the team's events in the local DuckDB ledger, and the union the reads use
- `sync.py`: the background shipper and puller of a controller
"""

from .config import TeamConfig, TeamConfigError
from .store import StoreUnavailable, TeamStore

__all__ = ["StoreUnavailable", "TeamConfig", "TeamConfigError", "TeamStore"]
