"""The bytes between a renter's SSH session and the command it runs on a simulated host: a script on
stdin read whole (up to 16 MiB), and a session's stdin passed on as it arrives."""

from __future__ import annotations

import asyncio
import contextlib

import asyncssh


async def read_all(proc: asyncssh.SSHServerProcess[bytes]) -> bytes:
    chunks = []
    total = 0
    while True:
        try:
            chunk = await proc.stdin.read(65536)
        except asyncssh.BreakReceived:
            break
        if not chunk:
            break
        chunks.append(chunk if isinstance(chunk, bytes) else chunk.encode())
        total += len(chunk)
        if total > 16 * 1024 * 1024:
            break
    return b"".join(chunks)


async def pump_in(
    proc: asyncssh.SSHServerProcess[bytes],
    sub: asyncio.subprocess.Process,
    received: list[bytes] | None = None,
) -> None:
    assert sub.stdin is not None
    try:
        while chunk := await proc.stdin.read(65536):
            data = chunk if isinstance(chunk, bytes) else chunk.encode()
            if received is not None:
                received.append(data)
            sub.stdin.write(data)
            await sub.stdin.drain()
    except (asyncssh.Error, ConnectionError, BrokenPipeError):
        pass
    finally:
        with contextlib.suppress(Exception):
            sub.stdin.close()
