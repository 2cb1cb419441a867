"""Instance to instance copies (`PUT /api/v0/commands/copy_direct/`, docs/fidelity.md): sized
when asked, landed rsync's way after ~30 s plus their bytes over the slower line."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .rental import SimInstance

START_S = 30.0  # "check instance status bar for progress updates (~30 seconds delayed)"


@dataclass
class Copy:
    src_id: int
    src_path: str
    dst_id: int
    dst_path: str
    asked_at: float
    due_at: float | None = None  # set when the simulator first sizes it
    bytes: int = 0
    done: bool = False
    landed: bool = False  # False when done: the source or its path was not there
    cancelled: bool = False  # `DELETE /api/v0/commands/copy_direct/` before it landed
    billed: bool = False  # its bytes billed as bandwidth (never within one machine or network)


def container_id(value: object) -> int | None:
    """An instance id as a copy names it: `123`, `"123"`, or the CLI's `"C.123"`
    (vastai/api/storage.py `copy`). Volumes (`V.`) are not simulated: None."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        return None
    text = str(value).strip().removeprefix("C.")
    return int(text) if text.isdigit() and len(text) < 19 else None


def in_sandbox(path: str, sandbox: Path, workdir: Path) -> Path | None:
    p = Path(path)
    if not p.is_absolute() or ".." in p.parts:
        return None
    for home in (Path("/root"), *(s for s in workdir.glob("i*") if s.is_dir())):
        if p == home or home in p.parents:
            return sandbox / p.relative_to(home)
    return None


def same_network(src: SimInstance, dst: SimInstance) -> bool:
    """Two instances on one machine, or on one host's machines in one place (the docs' "same
    provider and location"): a copy between them moves no bytes over the internet."""
    a, b = src.machine, dst.machine
    return a.id == b.id or (a.host_id == b.host_id and a.geolocation == b.geolocation)


def host_down(inst: SimInstance, now: float) -> bool:
    """Its host went offline during its last boot (before any stop ended it), as of `now`."""
    if not inst.segments:
        return False
    seg = inst.segments[-1]
    off = seg.offline_at
    return off is not None and off <= now and (seg.end is None or off < seg.end)


def tree_bytes(src: Path) -> int:
    if src.is_file():
        return src.stat().st_size
    return sum(f.stat().st_size for f in src.rglob("*") if f.is_file() and not f.is_symlink())


def copy_tree(src: Path, dst: Path, contents: bool) -> None:
    """rsync's rule: `src/` copies what it holds into `dst`, `src` copies the folder itself."""
    if src.is_file():
        target = dst / src.name if dst.is_dir() else dst
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        return
    shutil.copytree(src, dst if contents else dst / src.name, symlinks=True, dirs_exist_ok=True)


def run_due(
    copies: list[Copy],
    instances: dict[int, SimInstance],
    sandbox: Callable[[SimInstance], Path],
    workdir: Path,
    now: float,
    bill: Callable[[SimInstance, int, int], None],
) -> None:
    for c in copies:
        if c.done:
            continue
        src, dst = instances.get(c.src_id), instances.get(c.dst_id)
        here = None if src is None else in_sandbox(c.src_path, sandbox(src), workdir)
        if c.due_at is None:
            c.bytes = tree_bytes(here) if here is not None and here.exists() else 0
            mbps = min(src.machine.inet_up, dst.machine.inet_down) if src and dst else 100.0
            c.due_at = c.asked_at + START_S + c.bytes * 8 / (max(mbps, 1.0) * 1e6)
        if now < c.due_at:
            continue
        c.done = True
        if src is None or dst is None or src.destroyed_at is not None:
            continue
        if host_down(src, c.due_at):
            continue  # its host went offline before the copy was through: nothing came off
        if dst.destroyed_at is not None or here is None or not here.exists():
            continue
        if c.src_path.endswith("/") and not here.is_dir():
            continue  # rsync: `file/` is "Not a directory", and nothing is copied
        there = in_sandbox(c.dst_path, sandbox(dst), workdir)
        if there is None:
            continue
        if c.dst_path.endswith("/"):
            there.mkdir(parents=True, exist_ok=True)
        copy_tree(here, there, contents=c.src_path.endswith("/"))
        c.landed = True
        if not same_network(src, dst):
            c.billed = True
            bill(src, c.bytes, 0)  # the source's upload
            bill(dst, 0, c.bytes)  # the destination's download


def cancel_into(copies: list[Copy], dst_id: int) -> None:
    for c in copies:
        if c.dst_id == dst_id and not c.done:
            c.done = c.cancelled = True
