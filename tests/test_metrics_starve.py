"""`--metrics` cannot starve the controller (issue 45, item 4): prometheus-client's threaded
server held one descriptor per connection with no cap and no timeout, so 250 idle connections
under a 256-descriptor limit left none for SSH or the ledger. Through the guarded listener, at
most a few are held, the rest refused or dropped, a scraper still gets its figures, and the
controller can still open SSH connections and files."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest
from rentwatch.run.metrics_server import IDLE_S

CHILD = textwrap.dedent(
    """
    import asyncio, os, resource, sys
    import asyncssh
    from rentwatch.engine.hosts.ssh import loopback_handshakes
    from rentwatch.notify.metrics import Metrics
    from rentwatch.run.metrics_server import serve_metrics

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    m = Metrics()
    m.update("starve", {"verified": 2}, 0.5, 3, 1, {"running": 1}, 0.1)
    server = serve_metrics(m, "127.0.0.1", 0)
    print(server.port, server.cap, flush=True)
    sys.stdin.readline()  # the flood is in place
    # what the engine needs meanwhile: descriptors for the ledger, SSH sessions to its hosts
    held = []
    try:
        for _ in range(120):
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        print("files", len(held), exc.strerror, flush=True)
    else:
        print("files", len(held), "ok", flush=True)
    for fd in held:
        os.close(fd)
    key = asyncssh.generate_private_key("ssh-ed25519")
    walls = asyncio.run(loopback_handshakes(key, 5, 10.0))
    print("ssh", len(walls), flush=True)
    sys.stdin.readline()
    server.close()
    """
)


def _closed_by_peer(sock: socket.socket, timeout: float) -> bool:
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.skipif(sys.platform != "linux", reason="descriptor limits as on Linux")
def test_250_idle_metrics_connections_under_a_256_descriptor_limit(tmp_path):
    err = tmp_path / "stderr"
    with err.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    idle: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        port, cap = (int(w) for w in proc.stdout.readline().split())
        assert cap <= 16  # a sixteenth of the limit; the rest for SSH, the ledger, the API
        for _ in range(250):  # connect and say nothing
            idle.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(0.5)
        proc.stdin.write("\n")
        proc.stdin.flush()
        files = proc.stdout.readline().split()
        ssh = proc.stdout.readline().split()
        assert files == ["files", "120", "ok"], files
        assert ssh == ["ssh", "5"], ssh  # five SSH handshakes, every one answered
        # a scraper still gets the figures, at once
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as r:
            assert b'rentwatch_creates_total{campaign="starve"} 3.0' in r.read()
        # every idle connection is closed: refused or dropped at the cap, or at the deadline
        time.sleep(IDLE_S + 1)
        assert all(_closed_by_peer(s, 2.0) for s in idle)
        proc.stdin.write("\n")
        proc.stdin.flush()
        proc.wait(10)
        assert err.stat().st_size < 4096, err.read_text()[:2000]
    finally:
        for s in idle:
            s.close()
        proc.kill()
        proc.wait()
