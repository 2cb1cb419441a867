"""The processes a simulated host's commands leave running, found by their HOME or working
directory in the host's sandbox, and ended."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def host_processes(root: Path) -> dict[int, int]:
    """pid -> process group of every process of the simulated hosts under `root`: those whose
    working directory or HOME (every command's, inherited by what it starts) lies there."""
    top = str(root.resolve())
    inside = (top, top + os.sep)
    found: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            pgid = os.getpgid(pid)
        except OSError:  # gone, or not ours to read
            continue
        home = next((e[5:].decode(errors="replace") for e in env if e.startswith(b"HOME=")), "")
        if cwd == top or cwd.startswith(inside[1]) or home == top or home.startswith(inside[1]):
            found[pid] = pgid
    return found


def kill_groups(root: Path, rounds: int = 3) -> None:
    """SIGKILL the process groups of every host process under `root`; a second look catches what a
    dying shell started in between."""
    ours = os.getpgrp()
    for _ in range(rounds):
        found = host_processes(root)
        if not found:
            return
        for pid, pgid in found.items():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if pgid != ours:
                    os.killpg(pgid, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
