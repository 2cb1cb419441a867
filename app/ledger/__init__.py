"""The append-only DuckDB ledger: events, GPU samples, derived views, the receipt, and the
named reads the engine uses (no `where=` text outside this package)."""

from .event import Event
from .kinds import EventKind
from .store import Ledger, LedgerError, LedgerUnwritable

__all__ = ["Event", "EventKind", "Ledger", "LedgerError", "LedgerUnwritable"]
