"""The team store: a team's controllers share their ledgers' events through one PostgreSQL server,
while each keeps its own DuckDB ledger as its source of truth and its outbox."""
