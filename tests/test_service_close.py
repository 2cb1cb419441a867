"""The controller's API closing while clients connect: nothing reaches the loop's exception
handler or stderr, and the socket's file is gone once it has stopped."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from rentwatch.run.service.controller import Controller
from rentwatch.run.service.listener import Listener
from rentwatch.run.service.server import ServiceServer


def _catching(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    caught: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: caught.append(context))
    return caught


def test_a_listener_closed_in_the_turn_a_client_connects_says_nothing(tmp_path):
    async def main() -> list[dict[str, Any]]:
        caught = _catching(asyncio.get_running_loop())
        path = str(tmp_path / "s.sock")
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(path)
        listener = Listener(lsock, asyncio.Protocol)
        listener.start()
        await asyncio.sleep(0)  # it waits for a connection
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(path)  # queued: the socket is readable at the loop's next select
        # the close starts in that next turn, before the listener's reader runs in it
        await asyncio.ensure_future(listener.close())
        await asyncio.sleep(0)
        client.close()
        return caught

    assert asyncio.run(main()) == []


def test_clients_connecting_while_the_controller_stops(tmp_path, capfd):
    async def main() -> list[dict[str, Any]]:
        caught = _catching(asyncio.get_running_loop())
        server = ServiceServer(Controller("unbound", tmp_path / "l.duckdb"))
        path = tmp_path / "s.sock"
        await server.start(path)
        clients: list[socket.socket] = []
        for _ in range(8):  # connections taken while it serves, none of them asking anything
            clients.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            clients[-1].connect(str(path))
            await asyncio.sleep(0)
        while len(server.listeners[0].open) < len(clients):
            await asyncio.sleep(0)  # all taken: the listener waits for the next one
        clients.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
        clients[-1].connect(str(path))  # the stop's first turn is the turn this one is seen in
        await server.stop()
        for client in clients:
            client.close()
        return caught

    assert asyncio.run(main()) == []
    assert not Path(tmp_path / "s.sock").exists()
    assert capfd.readouterr().err == ""
