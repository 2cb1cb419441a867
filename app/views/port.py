"""What the dashboard needs of an engine and a ledger: a controller's, over its socket (or a test's
fake). The widgets depend on these, never on an implementation."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..engine.intents import Intent
from .snapshot import FleetReadout


@dataclass(frozen=True)
class EnginePort(Protocol):
    on_snapshot: Callable[[FleetReadout], None]
    on_error: Callable[[str], None]
    # why the controller ended on its own (None: it serves), and the command that ends the rest
    ended: str | None
    end_hint: str
    outlives_dashboard: bool  # it goes on when the dashboard quits (a process of its own)

    def start(self) -> None: ...

    def submit(self, intent: Intent) -> concurrent.futures.Future[Any]: ...

    def detail(self, instance_id: int, logs: bool = True) -> concurrent.futures.Future[Any]: ...

    def jobs(self) -> concurrent.futures.Future[Any]: ...

    def job_log(self, name: str) -> concurrent.futures.Future[Any]: ...

    def shutdown(self, mode: str = "stop") -> None: ...


class LedgerPort(Protocol):
    def query(self, sql: str, *args: Any, **kwargs: Any) -> Any: ...

    def receipt(self, *args: Any, **kwargs: Any) -> Any: ...

    def interrupt(self) -> Any: ...
