"""Running commands and probes on rented hosts over asyncssh, with pinned host keys, hard
timeouts and capped output. The account's API key is never part of anything sent."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from .core.errors import RentwatchError


class SSHFailure(RentwatchError):
    title = "SSH failed"


class HostKeyChanged(SSHFailure):
    title = "host key changed"


@dataclass(frozen=True)
class RunResult:
    exit_status: int | None
    stdout: bytes
    stderr: bytes
    truncated: bool


def load_or_create_key(path: Path) -> asyncssh.SSHKey:
    """rentwatch's own SSH key (ed25519), created 0600 on first use."""
    if path.exists():
        return asyncssh.read_private_key(str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="rentwatch")
    fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.export_private_key())
    return key


class SSHRunner:
    def __init__(
        self, key: asyncssh.SSHKey, connect_timeout: float = 10.0, max_output: int = 1 << 20
    ) -> None:
        self.key = key
        self.connect_timeout = connect_timeout
        self.max_output = max_output
        self.pinned: dict[int, str] = {}  # instance id -> host key fingerprint
        self.sent: list[bytes] = []  # everything written to hosts (kept short; tests read it)
        self.record_sent = False

    @property
    def public_key(self) -> str:
        return self.key.export_public_key().decode().strip()

    async def _connect(
        self, instance_id: int, host: str, port: int
    ) -> asyncssh.SSHClientConnection:
        try:
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    host,
                    port,
                    username="root",
                    client_keys=[self.key],
                    known_hosts=None,
                    agent_path=None,
                    config=None,
                    keepalive_interval=0,
                    login_timeout=self.connect_timeout,
                ),
                self.connect_timeout,
            )
        except TimeoutError:
            raise SSHFailure(
                f"no SSH answer from {host}:{port} in {self.connect_timeout:g}s"
            ) from None
        except (OSError, asyncssh.Error) as exc:
            raise SSHFailure(f"{host}:{port}: {type(exc).__name__}: {str(exc)[:160]}") from None
        server_key = conn.get_server_host_key()
        fp = server_key.get_fingerprint() if server_key else "none"
        known = self.pinned.setdefault(instance_id, fp)
        if known != fp:
            conn.close()
            raise HostKeyChanged(
                f"instance {instance_id}'s host key changed ({known} -> {fp}): refused"
            )
        return conn

    async def connect(self, instance_id: int, host: str, port: int) -> asyncssh.SSHClientConnection:
        """A connection checked against the instance's pinned key, for SFTP work; the caller
        closes it."""
        return await self._connect(instance_id, host, port)

    async def run(
        self,
        instance_id: int,
        host: str,
        port: int,
        command: str,
        *,
        stdin: bytes | None = None,
        timeout: float = 60.0,
    ) -> RunResult:
        """Run one command; the whole thing (connect included) ends within `timeout` seconds."""
        if self.record_sent:
            self.sent.append(command.encode() + b"\n" + (stdin or b""))
        conn = await self._connect(instance_id, host, port)
        try:
            return await asyncio.wait_for(self._run(conn, command, stdin), timeout)
        except TimeoutError:
            raise SSHFailure(f"'{command[:40]}' did not finish within {timeout:g}s") from None
        except (OSError, asyncssh.Error) as exc:
            raise SSHFailure(f"session dropped: {type(exc).__name__}: {str(exc)[:160]}") from None
        finally:
            conn.close()

    async def _run(
        self, conn: asyncssh.SSHClientConnection, command: str, stdin: bytes | None
    ) -> RunResult:
        proc = await conn.create_process(command, encoding=None)
        if stdin:
            proc.stdin.write(stdin)
        proc.stdin.write_eof()
        out = bytearray()
        truncated = False
        while True:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            out += chunk
            if len(out) > self.max_output:
                truncated = True
                proc.close()
                break
        err = b""
        if not truncated:
            err = await proc.stderr.read(65536)
            await proc.wait_closed()
        return RunResult(proc.exit_status, bytes(out[: self.max_output]), err, truncated)
