"""The append-only DuckDB ledger: events, GPU samples, derived views, the receipt."""

from .store import Event, Ledger, LedgerError

__all__ = ["Event", "Ledger", "LedgerError"]
