"""Real SSH for simulated hosts on loopback: a proxy route and, on a share of hosts, a direct one;
commands run in a per-instance sandbox, the GPU probes answered by `probe_answers`."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncssh

from . import copies, work_meter
from .host_procs import host_processes, kill_groups
from .images import image_facts
from .machines import keyed_rng
from .market import SimMarket
from .probe_answers import NO_PYTHON_EXIT, NO_PYTHON_STDERR, PROBE_MARKER, probe_answer
from .rental import SimInstance

_STDIN_SCRIPT = re.compile(r"^\s*python3?\s+-(\s|$)")


VAST_IMAGES = ("vastai/", "docker.io/vastai/")  # images whose sessions see the container's env
ROOTED = ("/etc/environment", "/proc/1/environ")  # container paths kept in a host's sandbox
SIM_CLOCK_ENV = "RENTWATCH_SIM_CLOCK"  # the market clock's file, as probes/watchdog.py reads it
# AES-GCM, among OpenSSH's default ciphers (docs/fidelity.md): asyncssh's chacha20-poly1305,
# the first a client asks for, builds its cipher again for every packet, the costlier by far
SIM_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
# the key exchange of an sshd older than OpenSSH 9.9 (Ubuntu 22.04's and 24.04's: docs/fidelity.md):
# asyncssh's first choice, ML-KEM768 with X25519, costs a handshake half again its CPU
SIM_KEX = ("curve25519-sha256", "curve25519-sha256@libssh.org")
# how long a stop asked from inside an instance waits for its sessions' commands to answer:
# docker stop's wait before it kills what is left
STOP_GRACE_S = 10.0


async def read_all(proc: asyncssh.SSHServerProcess[bytes]) -> bytes:
    """A script on a session's stdin, read whole (up to 16 MiB)."""
    script = bytearray()
    with contextlib.suppress(asyncssh.BreakReceived):
        while len(script) <= 16 * 1024 * 1024 and (chunk := await proc.stdin.read(65536)):
            script += chunk
    return bytes(script)


async def pump_in(
    proc: asyncssh.SSHServerProcess[bytes],
    sub: asyncio.subprocess.Process,
    received: list[bytes] | None = None,
) -> None:
    """A session's stdin passed on to its command as it arrives."""
    assert sub.stdin is not None
    try:
        while chunk := await proc.stdin.read(65536):
            if received is not None:
                received.append(chunk)
            sub.stdin.write(chunk)
            await sub.stdin.drain()
    except (asyncssh.Error, ConnectionError, BrokenPipeError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sub.stdin.close()


def container_vars(inst: SimInstance) -> dict[str, str]:
    return {"CONTAINER_ID": str(inst.id), "CONTAINER_API_KEY": inst.api_key}


class _Server(asyncssh.SSHServer):
    def __init__(self, inst: SimInstance, conns: set[asyncssh.SSHServerConnection]) -> None:
        self.inst = inst
        self.conns = conns
        self.conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.conn = conn
        self.conns.add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is not None:
            self.conns.discard(self.conn)

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        if username != "root":
            return False
        wanted = key.export_public_key().decode().split()[1]
        return any(k.split()[1:2] == [wanted] for k in self.inst.ssh_keys)


class SSHHosts:
    def __init__(self, market: SimMarket, market_url: str, workdir: str | None = None) -> None:
        self.market = market
        self.market_url = market_url
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="rentwatch-sim-"))
        self._own_workdir = workdir is None
        # the market's time, for the hosts' watchdogs (probes/watchdog.py `sim_clock`): a
        # scaled clock that bends or stands is not wall time over one scale
        self.clock_file = self.workdir / "market_clock"
        self.listeners: dict[int, list[Any]] = {}  # instance id -> its listeners (one a route)
        # instance id -> the SSH connections open to it: a real host's sshd ends them when the
        # box stops, restarts or is re-imaged, so a renter's kept connection cannot outlive it
        self.connections: dict[int, set[asyncssh.SSHServerConnection]] = {}
        self.handshakes = 0  # SSH connections accepted (each a key exchange and a login)
        self.host_keys: dict[int, asyncssh.SSHKey] = {}
        # sessions per instance so far: a session's drop is drawn from its instance and its
        # number there, not from one sequence over every host, so the hosts whose sessions
        # come in at once (their order is the box's) draw the same drops in any order
        self.sessions_of: dict[int, int] = {}
        self.dropped = 0  # sessions cut mid-command by the ssh_drop fault or the proxy
        self.by_route: dict[str, int] = {"direct": 0, "proxy": 0}  # sessions per route
        self._running: set[asyncio.subprocess.Process] = set()  # commands not yet done with
        self._procs: dict[int, set[asyncio.subprocess.Process]] = {}  # instance id -> its own
        self._stops_seen: dict[int, int] = {}  # instance id -> the stops whose kill ran
        self._answering: dict[int, int] = {}  # instance id -> its sessions running a command
        self._grace_until: dict[int, float] = {}  # instance id -> its stop's grace's end
        self.received: list[bytes] | None = None  # a list records what renters send (tests)
        self.hung: set[int] = set()  # instances whose commands never answer (`hang_sessions`)

    def sandbox(self, inst: SimInstance) -> Path:
        path = self.workdir / f"i{inst.id}"
        path.mkdir(parents=True, exist_ok=True)
        return path

    async def settle(self, exit_wait_s: float) -> None:
        """A stepped clock moved: one `sync` at the new time, then a wait (at most `exit_wait_s`)
        until each sized job it let finish has written its exit code, as a real host has by the
        time the market's clock moves on."""
        released = {id(m) for m in self.market.meters if m.released}
        await self.sync()
        now = self.market.clock.now()

        def writing(m: work_meter.WorkMeter) -> bool:
            inst = self.market.live(m.instance_id)
            return inst is not None and inst.running(now) and not (m.folder / "exit").exists()

        ended = [m for m in self.market.meters if m.released and id(m) not in released]
        until = time.monotonic() + exit_wait_s
        while (ended := [m for m in ended if writing(m)]) and time.monotonic() < until:
            await asyncio.sleep(0.005)

    async def sync(self) -> None:
        now = self.market.clock.now()
        with contextlib.suppress(OSError):
            work_meter.write_whole(self.clock_file, f"{now:.3f}\n")
        self.market.market_stops(now)
        # copies between instances land (before a stop below kills anything)
        copies.run_due(
            self.market.copies,
            self.market.instances,
            self.sandbox,
            self.workdir,
            now,
            self.market.bill_bytes,
        )
        for meter in self.market.advance_work(now):  # sized jobs: progress, and their ends
            work_meter.write_progress(meter)
            if meter.done_at is not None:
                work_meter.release(meter)
        for inst in list(self.market.instances.values()):
            stops = sum(1 for seg in inst.segments if seg.end is not None and now >= seg.end)
            if stops > self._stops_seen.get(inst.id, 0):
                if self._answers_first(inst, stops):
                    continue
                # a stop (ours, an outbid, a contract's end) stops the container: every process
                # in it dies, a detached job's too ("stopped (killing running processes)",
                # rental-types.mdx), and its data stays
                self._stops_seen[inst.id] = stops
                self.disconnect(inst.id)
                self.kill_processes(inst)
                self.market.end_meters(inst.id)
            up = inst.destroyed_at is None and inst.running(now)
            if up and inst.id not in self.listeners:
                await self._open(inst)
            elif not up and inst.id in self.listeners:
                await self._close(inst.id)
                if inst.destroyed_at is not None:  # a destroyed host's processes end with it
                    self.kill_processes(inst)

    def _answers_first(self, inst: SimInstance, stops: int) -> bool:
        """Whether the instance's sessions finish their commands before its new stop reaches the
        box: one asked from inside (its container's key) does so on Vast only after the call has
        answered, so the command that asked still prints that answer; `STOP_GRACE_S` at most."""
        if inst.segments[stops - 1].stopped_inside and self._answering.get(inst.id):
            until = self._grace_until.setdefault(inst.id, time.monotonic() + STOP_GRACE_S)
            if time.monotonic() < until:
                return True
        self._grace_until.pop(inst.id, None)
        return False

    def disconnect(self, iid: int) -> None:
        """Every SSH connection open to the instance ends (its sshd went down with the box)."""
        for conn in list(self.connections.get(iid, ())):
            conn.close()

    def kill_processes(self, inst: SimInstance) -> None:
        """Every process the instance's commands started dies (their data stays in its sandbox)."""
        for sub in list(self._procs.pop(inst.id, set())):
            if sub.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(sub.pid, signal.SIGKILL)
        kill_groups(self.sandbox(inst))

    async def _open(self, inst: SimInstance) -> None:
        m = inst.machine
        routes = [("proxy", m.proxy_addr)] + ([("direct", m.direct_addr)] if m.direct else [])
        servers: list[Any] = []
        self.listeners[inst.id] = servers
        self.container_files(inst)
        for kind, addr in routes:
            server = await self._listen(inst, kind, addr)
            servers.append(server)
            port = server.sockets[0].getsockname()[1]
            if kind == "proxy":
                inst.ssh_port = port
            else:
                inst.direct_port = port

    async def _listen(self, inst: SimInstance, route: str, addr: str) -> Any:
        if inst.machine.behaviour == "ssh_dead":
            # accepts the TCP connection and never says a word
            async def stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                try:
                    await reader.read()
                finally:
                    writer.close()

            return await asyncio.start_server(stall, addr, 0)
        if inst.machine.id not in self.host_keys:
            self.host_keys[inst.machine.id] = asyncssh.generate_private_key("ssh-ed25519")
        sandbox = self.sandbox(inst)
        conns = self.connections.setdefault(inst.id, set())

        def server() -> _Server:
            self.handshakes += 1
            return _Server(inst, conns)

        return await asyncssh.listen(
            addr,
            0,
            server_host_keys=[self.host_keys[inst.machine.id]],
            server_factory=server,
            process_factory=lambda proc: self._run(inst, proc, route),
            sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=str(sandbox).encode()),
            allow_scp=False,
            keepalive_interval=0,
            encoding=None,
            encryption_algs=SIM_CIPHERS,
            kex_algs=SIM_KEX,
        )

    def hang_sessions(self, iid: int) -> None:
        """From now on instance `iid` accepts SSH and hangs every command it is sent, and
        what it ran dies (its watchdog included): a box wedged under its sshd."""
        self.hung.add(iid)
        self.kill_processes(self.market.instances[iid])

    async def replace_host_key(self, iid: int) -> None:
        """Serve instance `iid` with a new host key (an impostor, or a host re-imaged under
        the renter's feet); its SSH port changes too, as the instance list will show."""
        inst = self.market.instances[iid]
        self.host_keys[inst.machine.id] = asyncssh.generate_private_key("ssh-ed25519")
        await self._close(iid)
        await self._open(inst)

    async def _close(self, iid: int) -> None:
        for listener in self.listeners.pop(iid, []):
            listener.close()
        self.disconnect(iid)
        inst = self.market.instances.get(iid)
        if inst is not None:
            inst.ssh_port = inst.direct_port = None

    def _reap(self, sub: asyncio.subprocess.Process) -> None:
        """The command exited: close its stdin too (a session cut mid-command leaves it open).
        Output nobody read to its end keeps it listed, for `close_all` to drain."""
        if sub.stdin is not None:
            sub.stdin.close()
        for own in self._procs.values():
            own.discard(sub)
        if all(out is None or out.at_eof() for out in (sub.stdout, sub.stderr)):
            self._running.discard(sub)

    async def close_all(self) -> None:
        for iid in list(self.listeners):
            await self._close(iid)
        for sub in list(self._running):  # the market is closing: so do the commands it ran
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sub.pid, signal.SIGKILL)
            # its pipes close only at EOF, and a full pipe nobody reads (the session that
            # pumped it died) is never read to EOF: read what is left
            for out in (sub.stdout, sub.stderr):
                if out is not None:
                    with contextlib.suppress(RuntimeError, TimeoutError):
                        await asyncio.wait_for(out.read(), 5)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(sub.wait(), 5)
            self._reap(sub)
        # what the commands left behind: jobs and watchdogs detach (setsid nohup), each in a
        # process group of its own that outlived the command that launched it
        kill_groups(self.workdir)
        await asyncio.sleep(0.05)  # let the pipes' last callbacks run on this loop
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _env(self, inst: SimInstance) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "PYTHONPATH")}
        env |= inst.env | {"HOME": str(self.sandbox(inst)), "RENTWATCH_SIM_HOST": "1"}
        env |= {SIM_CLOCK_ENV: str(self.clock_file), "VAST_URL": self.market_url}
        return env | (container_vars(inst) if self.container_env(inst) else {})

    def _drawn(self, inst: SimInstance, what: str, share: float) -> bool:
        """One draw per instance, the same for every session of it."""
        return random.Random(f"{self.market.scenario.seed}:{what}:{inst.id}").random() < share

    def container_files(self, inst: SimInstance) -> None:
        """What a real container holds of its variables outside a session: /etc/environment once
        onstart wrote it, and PID 1's environment, here under the host's sandbox."""
        box = self.sandbox(inst)
        pairs = container_vars(inst) | {"VAST_URL": self.market_url, **inst.env}
        if inst.onstart and ">> /etc/environment" in inst.onstart:
            (box / "etc").mkdir(exist_ok=True)
            text = "".join(f"{k}={v}\n" for k, v in pairs.items())
            (box / "etc" / "environment").write_text(text)
        if self._drawn(inst, "pid1", self.market.scenario.ssh.proc_environ):
            (box / "proc" / "1").mkdir(parents=True, exist_ok=True)
            (box / "proc" / "1" / "environ").write_bytes(
                b"".join(f"{k}={v}".encode() + b"\0" for k, v in pairs.items())
            )

    def _rooted(self, inst: SimInstance, command: str) -> str:
        """A command's absolute container paths that a simulated host keeps in its sandbox."""
        box = self.sandbox(inst)
        for path in ROOTED:
            command = command.replace(f" {path}", f" {box}{path}")
        return command

    def container_env(self, inst: SimInstance) -> bool:
        """Whether this instance's sessions carry the container's variables (`[ssh]
        container_env` of the instances; None: Vast's own images only)."""
        share = self.market.scenario.ssh.container_env
        if share is None:
            return inst.image.startswith(VAST_IMAGES)
        return self._drawn(inst, "env", share)

    async def _run(
        self, inst: SimInstance, proc: asyncssh.SSHServerProcess[bytes], route: str = "proxy"
    ) -> None:
        self.by_route[route] = self.by_route.get(route, 0) + 1
        command = self._rooted(inst, proc.command or "")
        if inst.id in self.hung:
            with contextlib.suppress(asyncssh.Error, ConnectionError, BrokenPipeError):
                await proc.channel.wait_closed()  # never a word, never an exit status
            return
        self._answering[inst.id] = self._answering.get(inst.id, 0) + 1
        try:
            sc = self.market.scenario
            n = self.sessions_of[inst.id] = self.sessions_of.get(inst.id, 0) + 1
            rng = keyed_rng(sc.seed, "ssh-drop", inst.id, n)
            drop = sc.faults.ssh_drop > 0 and rng.random() < sc.faults.ssh_drop
            drop |= route == "proxy" and sc.ssh.proxy_drop > 0 and rng.random() < sc.ssh.proxy_drop
            stdin = b""
            if self.received is not None:
                self.received.append(command.encode())
            if _STDIN_SCRIPT.match(command):
                stdin = await read_all(proc)
                if self.received is not None:
                    self.received.append(stdin)
                if not image_facts(inst.image, sc.images).python:
                    # the image has no python3: the shell says so, whatever the script
                    proc.stderr.write(NO_PYTHON_STDERR)
                    proc.exit(NO_PYTHON_EXIT)
                    return
                if stdin.startswith(PROBE_MARKER):
                    if drop:
                        self.dropped += 1
                        proc.channel.abort()
                        return
                    out = probe_answer(self.market, inst, stdin, command, lambda: self._busy(inst))
                    self.market.bill_bytes(inst, down=len(out), up=len(stdin) + len(command))
                    proc.stdout.write(out)
                    proc.exit(0 if b'"ok": true' in out or b"nvml" in out else 1)
                    return
            await self._subprocess(inst, proc, command, stdin, drop)
        except (asyncssh.Error, ConnectionError, BrokenPipeError):
            pass
        finally:
            self._answering[inst.id] -= 1

    async def _subprocess(
        self,
        inst: SimInstance,
        proc: asyncssh.SSHServerProcess[bytes],
        command: str,
        stdin: bytes,
        drop: bool,
    ) -> None:
        # a sized job's launch: its work is metered at this host's speed, its end held till then
        meter = work_meter.launch(inst, command, self.sandbox(inst), self.market.clock.now())
        if meter is not None:
            self.market.add_meter(meter)
        sub = await asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command or "true",
            cwd=str(self.sandbox(inst)),
            env=self._env(inst),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self._running.add(sub)
        self._procs.setdefault(inst.id, set()).add(sub)
        asyncio.ensure_future(sub.wait()).add_done_callback(lambda _: self._reap(sub))
        inst.busy_until = float("inf")
        try:
            if stdin:
                assert sub.stdin is not None
                sub.stdin.write(stdin)
                sub.stdin.close()
            else:
                asyncio.ensure_future(pump_in(proc, sub, self.received))

            moved = [0]

            async def pump(src: asyncio.StreamReader | None, dst: Any) -> None:
                assert src is not None
                while chunk := await src.read(65536):
                    moved[0] += len(chunk)
                    dst.write(chunk)

            if drop:
                self.dropped += 1
                await asyncio.sleep(0.2)
                proc.channel.abort()  # the session dies; the command goes on like on a real host
                return
            await asyncio.gather(pump(sub.stdout, proc.stdout), pump(sub.stderr, proc.stderr))
            self.market.bill_bytes(inst, down=moved[0], up=len(stdin) + len(command))
            code = await sub.wait()
            proc.exit(code)
        finally:
            inst.busy_until = self.market.clock.now()

    def _busy(self, inst: SimInstance) -> bool:
        """Is a job process alive in this host's sandbox (detached ones, not its watchdog)?"""
        for pid in host_processes(self.sandbox(inst)):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"watchdog.py" not in f.read():
                        return True
            except OSError:
                continue
        return False
