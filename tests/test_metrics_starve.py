"""`--metrics` cannot starve the controller (issue 45, item 4): prometheus-client's threaded
server held one descriptor per connection with no cap and no timeout, so 250 idle connections
under a 256-descriptor limit left none for SSH or the ledger. Through the guarded listener, at
most a few are held, the rest refused or dropped, a scraper still gets its figures, and the
controller can still open SSH connections and files."""

from __future__ import annotations

import contextlib
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
    from rentwatch.run.metrics_server import MetricsServer

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    m = Metrics()
    m.update("starve", {"verified": 2}, 0.5, 3, 1, {"running": 1}, 0.1)
    server = MetricsServer(m, "127.0.0.1", 0)
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


JOBS = "".join(
    f'\n[[jobs]]\nname = "j{i}"\nrun = "python3 -c \\"import time; time.sleep(2)\\""\nretries = 2\n'
    for i in range(3)
)


@pytest.mark.skipif(sys.platform != "linux", reason="descriptor limits as on Linux")
def test_a_campaign_finishes_its_jobs_with_250_idle_metrics_connections(make_sim, tmp_path):
    """The report's run: `run --headless --metrics` under a 256-descriptor limit, with 250
    connections to /metrics held open and silent the whole campaign. Its jobs finish on its
    hosts, and none is given up for "Too many open files"."""
    import resource

    from rentwatch.ledger import Ledger

    from .campaigns import campaign_text, headless_cmd, headless_env

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    sim = make_sim(
        seed=3, offers=30, time_scale=120, host_class=[{"behaviour": "healthy", "share": 1}]
    )
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("scraped", 2) + JOBS)
    ledger = tmp_path / "l.duckdb"
    cmd = headless_cmd(sim, tmp_path, camp, ledger, "--metrics", "127.0.0.1:0", "--no-api")
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=headless_env(sim),
        cwd=tmp_path,
        preexec_fn=limited,
    )
    idle: list[socket.socket] = []
    seen = ""
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen += line
            if "metrics on http://" in line:
                port = int(line.split("metrics on http://")[1].split("/")[0].rsplit(":", 1)[1])
                break
        else:
            raise AssertionError(f"no metrics line:\n{seen[-2000:]}")
        for _ in range(250):
            with contextlib.suppress(OSError):  # refused at the cap: the guard at work
                idle.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        out, _ = proc.communicate(timeout=400)
        out = seen + out
    finally:
        for s in idle:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    assert "Too many open files" not in out
    with Ledger(ledger, read_only=True) as led:
        done = led.events(where="kind = 'job_finished' AND ok")
        dead = led.query("select count(*) from instances where failure_class = 'ssh_dead'")
    assert len({e.detail.get("job") for e in done}) == 3
    assert dead.rows[0][0] == 0
