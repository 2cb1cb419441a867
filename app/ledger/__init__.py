"""The append-only DuckDB ledger: events, GPU samples, derived views, the receipt, and the
named reads the engine uses (no `where=` text outside this package)."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .event import Event
    from .kinds import EventKind
    from .store import Ledger, LedgerError, LedgerUnwritable

__all__ = ["Event", "EventKind", "Ledger", "LedgerError", "LedgerUnwritable"]
# Imported on first use: a command that never opens a ledger (`--help`, `ls`) need not load
# DuckDB, which costs more than the rest of the CLI's start.
_HOME = {"Event": ".event", "EventKind": ".kinds"} | dict.fromkeys(__all__[2:], ".store")


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_HOME[name], __name__), name)
