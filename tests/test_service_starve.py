"""The controller cannot be starved (issue 30, item 1): idle unauthenticated TCP connections
are capped and dropped within seconds, a client with the token still gets in, and accept
errors are written once per burst, not once per try."""

from __future__ import annotations

import asyncio
import errno
import io
import json
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from rentwatch.run.service import listener as listener_mod
from rentwatch.run.service.controller import Controller
from rentwatch.run.service.listener import FIRST_REQUEST_S, Listener
from rentwatch.run.service.server import ServiceServer


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


DEADLINE_S = 2.0


def test_idle_connections_are_capped_and_dropped_and_a_real_client_gets_in(tmp_path):
    async def main() -> None:
        server = ServiceServer(Controller("unbound", tmp_path / "l.duckdb"))
        await server.start(tmp_path / "s.sock", ("127.0.0.1", 0), tmp_path / "l")
        try:
            tcp = server.listeners[-1]
            tcp.cap = 16
            # no deadline to speak of while the real client gets in beside the idle ones: beside
            # four CPU-bound processes the connects alone outlasted a 2 s one, and the idle ones
            # were gone before it asked
            tcp.first_request_s = 600.0
            assert server.url and server.token_file
            host, port = server.url.removeprefix("http://").rsplit(":", 1)
            idle = []
            for _ in range(60):  # connect and say nothing
                idle.append(await asyncio.open_connection(host, int(port)))
                await asyncio.sleep(0)
            await asyncio.sleep(0.2)
            assert len(tcp.open) <= tcp.cap
            token = server.token_file.read_text().strip()
            async with httpx.AsyncClient(base_url=server.url) as http:
                r = await http.get("/v1/status", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200 and r.json()["campaign"] == "unbound"
                # it got in beside the idle ones, not after their deadline had dropped them all
                assert len(tcp.open) > 1, tcp.open
                # the deadline a connection has to ask: 2 s, not the default 5 (that it is kept,
                # not how long it is, is what this test checks); as many idle ones again as the
                # cap take it, and make the earlier ones room (the oldest silent one goes)
                tcp.first_request_s = DEADLINE_S
                for _ in range(tcp.cap):
                    idle.append(await asyncio.open_connection(host, int(port)))
                    await asyncio.sleep(0)
                # a wrong token is no valid request: it is dropped at the deadline like silence
                rogue = await asyncio.open_connection(host, int(port))
                rogue[1].write(b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n")
                await asyncio.sleep(DEADLINE_S + 1.5)
                assert tcp.open and all(timer is None for timer in tcp.open.values())
                for reader, _ in idle + [rogue]:
                    await asyncio.wait_for(reader.read(), 2)  # closed by the server: it ends
                    assert reader.at_eof()
                # the valid client's keep-alive connection outlived the deadline
                r = await http.get("/v1/status", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200
            assert tcp.dropped >= len(idle) + 1  # every idle one and the rogue
            for _, writer in idle + [rogue]:
                writer.close()
        finally:
            await server.stop()

    asyncio.run(main())


def test_accept_errors_are_written_once_per_burst(monkeypatch):
    monkeypatch.setattr(listener_mod, "ACCEPT_RETRY_S", 0.0)

    class Flaky(socket.socket):
        """A listening socket whose first 500 accepts fail as if out of descriptors."""

        fails = 0

        def accept(self) -> tuple[socket.socket, Any]:
            if Flaky.fails < 500:
                Flaky.fails += 1
                raise OSError(errno.EMFILE, "Too many open files")
            return super().accept()

    async def main() -> str:
        plain = socket.create_server(("127.0.0.1", 0))
        lsock = Flaky(plain.family, plain.type, fileno=plain.detach())
        log = io.StringIO()
        lst = Listener(lsock, asyncio.Protocol, log=log)
        lst.start()
        client = socket.create_connection(lsock.getsockname())
        for _ in range(200):
            if lst.open:
                break
            await asyncio.sleep(0.01)
        assert lst.open, "the connection after the burst was never accepted"
        client.close()
        await lst.close()
        return log.getvalue()

    out = asyncio.run(main())
    lines = out.splitlines()
    assert len(lines) == 2, out[:500]
    assert "Too many open files" in lines[0] and "after 500 failures" in lines[1]


CHILD = textwrap.dedent(
    """
    import asyncio, resource, sys
    from pathlib import Path
    from rentwatch.run.service.controller import Controller
    from rentwatch.run.service.server import ServiceServer

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    d = Path(sys.argv[1])

    async def main():
        server = ServiceServer(Controller("unbound", d / "l.duckdb"))
        await server.start(d / "s.sock", ("127.0.0.1", 0), d / "l")
        print(server.url, server.listeners[-1].cap, flush=True)
        await asyncio.sleep(60)

    asyncio.run(main())
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="descriptor limits as on Linux")
def test_250_idle_connections_under_a_256_descriptor_limit(tmp_path):
    """The report's setup: the controller under a 256-descriptor limit, 250 connections that
    send nothing. It keeps answering a client with the token, and its log stays small."""
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        assert proc.stdout is not None
        url, cap = proc.stdout.readline().split()
        assert int(cap) <= 64  # a quarter of the limit; the rest for SSH and the ledger
        host, port = url.removeprefix("http://").rsplit(":", 1)
        idle = []
        for _ in range(250):
            s = socket.create_connection((host, int(port)))
            idle.append(s)
        token = Path(tmp_path / "l.token").read_text().strip()
        for _ in range(3):
            r = httpx.get(f"{url}/v1/status", headers={"Authorization": f"Bearer {token}"})
            assert r.status_code == 200 and json.loads(r.text)["campaign"] == "unbound"
        time.sleep(FIRST_REQUEST_S + 1)
        assert all(_closed_by_peer(s, 2.0) for s in idle[-int(cap) :])
        for s in idle:
            s.close()
        assert err.stat().st_size < 4096, err.read_text()[:2000]
    finally:
        proc.kill()
        proc.wait()
