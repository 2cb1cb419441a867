"""The service's two ends against a controller with no engine behind it: the dashboard's
`RemoteEngine` takes a refusal as its reply, as the in-process engine answers it, while the CLI's
`ControllerClient` raises it; and a server registers itself for `ls` and is gone from the
registry, with its socket, once it stops."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rentwatch.engine.intents import Intent, Reply, StopIntent
from rentwatch.run.service import api, registry
from rentwatch.run.service.controller import Controller
from rentwatch.run.service.remote import ControllerClient, RemoteEngine
from rentwatch.run.service.server import ServiceServer
from rentwatch.run.service.target import Target


class Refusing(Controller):
    """Refuses every intent as not held; lists no jobs."""

    async def apply(self, intent: Intent) -> Reply:
        return Reply.refusal(f"instance {getattr(intent, 'instance_id', '?')} is not held", True)

    async def jobs(self) -> list[dict[str, Any]]:
        return []


class Served:
    """A `ServiceServer` on a loop and thread of its own."""

    def __init__(self, d: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = ServiceServer(Refusing("refusing", d / "l.duckdb"))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self.server.start(d / "s.sock"))
        self.target = Target(socket=str(self.server.socket_path))

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(20)

    def close(self) -> None:
        self.call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    s = Served(tmp_path)
    try:
        yield s
    finally:
        s.close()


def test_a_refusal_is_the_dashboards_reply_and_the_clis_error(served: Served) -> None:
    engine = RemoteEngine(served.target)
    reply = engine.submit(StopIntent(7)).result(20)
    assert reply == Reply.refusal("instance 7 is not held", True)
    assert engine.jobs().result(20) == []
    with (
        ControllerClient(served.target) as client,
        pytest.raises(api.ServiceError, match="instance 7 is not held"),
    ):
        client.intent(StopIntent(7))


def test_a_server_registers_itself_and_is_gone_once_stopped(served: Served) -> None:
    entry = served.server.register()
    assert entry.socket == served.target.socket and entry.campaign == "refusing"
    assert [e.pid for e in registry.find(socket_path=entry.socket)] == [entry.pid]
    served.close()
    served.close = lambda: None  # type: ignore[method-assign]  # closed once, here
    assert not (registry.runtime_dir() / "controllers" / f"{entry.pid}.json").exists()
    assert not Path(entry.socket).exists()
