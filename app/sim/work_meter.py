"""A sized job's compute on a simulated host, at its true delivered speed; its exit held on a FIFO
until the work is delivered."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.preflight.gpu_specs import expected_tflops
from .rental import SimInstance

_HOURS = re.compile(r"\bRENTWATCH_REF_HOURS=([0-9][0-9.eE+-]*)")
_GPU = re.compile(r"\bRENTWATCH_REF_GPU=(?:'([^']*)'|([^\s;'\"]+))")
_DIR = re.compile(r'\bRENTWATCH_JOB_DIR="\$HOME/([^"]+)"')
_CKPT = re.compile(r"""\bRENTWATCH_CHECKPOINT="\$HOME"/(?:'([^']*)'|([^\s;'"]+))""")
# The simulated job's training state, saved in its checkpoint folder as it goes (a real job
# saves its weights there): the reference GPU-hours done. A launch that finds it (the state a
# retry was given, pulled off the job's last host and pushed back) starts from it. Named per
# job: jobs that share one checkpoint path on a host do not resume from each other's state.
STATE = ".sim-trained"


def state_file(folder: Path, job: str) -> Path:
    return folder / f"{STATE}.{job}"


@dataclass
class WorkMeter:
    instance_id: int
    machine_id: int
    job: str
    ref_gpu: str
    ref_hours: float
    ref_tflops: float
    started_at: float
    folder: Path  # the job's folder in the host's sandbox
    at: float  # market time the work is counted up to
    work_ref_h: float = 0.0
    done_at: float | None = None  # market time the last of its work was delivered
    superseded: bool = False  # counts no more: launched again on its host, or the host stopped
    released: bool = False
    written: float = -1.0  # the last fraction written to the progress file
    checkpoint: Path | None = None  # the job's checkpoint folder in the sandbox, if it has one
    resumed_ref_h: float = 0.0  # the work its checkpoint held at launch

    def row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ROW} | {
            "work_ref_h": round(min(self.work_ref_h, self.ref_hours), 6),
            "resumed_ref_h": round(self.resumed_ref_h, 6),
        }


# a meter's fields in the market's truth as they are (`WorkMeter.row`)
ROW = ("instance_id", "machine_id", "job", "ref_gpu", "ref_hours", "started_at", "done_at")


def sized_launch(command: str) -> tuple[str, float, str] | None:
    """(ref_gpu, ref_hours, job folder under $HOME) of a sized job's launch command, else None."""
    hours, gpu, folder = _HOURS.search(command), _GPU.search(command), _DIR.search(command)
    if not (hours and gpu and folder):
        return None
    try:
        ref_hours = float(hours.group(1))
    except ValueError:
        return None
    name = gpu.group(1) if gpu.group(1) is not None else gpu.group(2)
    if not ref_hours > 0 or ".." in folder.group(1).split("/"):
        return None
    return name, ref_hours, folder.group(1)


def checkpoint_folder(command: str, sandbox: Path) -> Path | None:
    """The launched job's checkpoint folder in the sandbox ($HOME): None without one, or one
    outside the sandbox (an absolute path: the simulated host keeps no state there)."""
    found = _CKPT.search(command)
    if found is None:
        return None
    rel = found.group(1) if found.group(1) is not None else found.group(2)
    if not rel or ".." in rel.split("/"):
        return None
    return sandbox / rel


def saved_work(folder: Path | None, job: str, ref_hours: float) -> float:
    """Reference GPU-hours of `job` the checkpoint in `folder` holds (0: none, or unreadable)."""
    if folder is None:
        return 0.0
    try:
        done = float(state_file(folder, job).read_text().strip())
    except (OSError, ValueError):
        return 0.0
    return min(max(done, 0.0), ref_hours) if done == done else 0.0


def launch(inst: SimInstance, command: str, sandbox: Path, now: float) -> WorkMeter | None:
    """A meter for the sized job this command launches (None: not one), its end held by a FIFO."""
    found = sized_launch(command)
    if found is None:
        return None
    ref_gpu, ref_hours, rel = found
    ref_tflops = expected_tflops(ref_gpu)
    if not ref_tflops:
        return None  # a reference the table does not know: the job runs unheld
    folder = sandbox / rel
    folder.mkdir(parents=True, exist_ok=True)
    hold = folder / "hold"
    with contextlib.suppress(FileNotFoundError):
        hold.unlink()
    os.mkfifo(hold)
    ckpt = checkpoint_folder(command, sandbox)
    done = saved_work(ckpt, folder.name, ref_hours)
    return WorkMeter(
        inst.id,
        inst.machine.id,
        folder.name,
        ref_gpu,
        ref_hours,
        ref_tflops,
        now,
        folder,
        now,
        work_ref_h=done,
        checkpoint=ckpt,
        resumed_ref_h=done,
    )


def speed_pieces(inst: SimInstance, lost_at: float | None) -> list[tuple[float, float, float]]:
    """(from, to, TFLOP/s) over the instance's life: its machine's real speed while running,
    less its throttle's drop once that sets in (a piece may be empty); nothing stopped, dark,
    halted or lost."""
    m = inst.machine
    if m.behaviour in ("stale_driver", "forged_preflight"):
        return []  # no CUDA op runs there
    out = []
    for seg in inst.segments:
        if seg.running_at is None:
            continue
        ends = [
            e
            for e in (seg.end, seg.halted_at, seg.offline_at, inst.destroyed_at, lost_at)
            if e is not None
        ]
        end = min(ends, default=float("inf"))
        start = seg.running_at
        if end <= start:
            continue
        t = end if seg.throttle_at is None else min(max(seg.throttle_at, start), end)
        out += [(start, t, m.real_tflops), (t, end, m.real_tflops * (1 - inst.throttle_drop))]
    return out


def advance(meter: WorkMeter, inst: SimInstance, now: float, lost_at: float | None) -> None:
    """Count the work delivered up to `now`; the moment its last part was delivered, once it is."""
    if meter.done_at is not None or meter.superseded or now <= meter.at:
        meter.at = max(meter.at, now)
        return
    need = meter.ref_hours - meter.work_ref_h
    for a, b, tflops in speed_pieces(inst, lost_at):
        lo, hi = max(a, meter.at), min(b, now)
        if hi <= lo or tflops <= 0:
            continue
        rate = tflops / meter.ref_tflops / 3600  # reference hours per market second
        if rate * (hi - lo) >= need:
            meter.work_ref_h = meter.ref_hours
            meter.done_at = lo + need / rate
            break
        meter.work_ref_h += rate * (hi - lo)
        need = meter.ref_hours - meter.work_ref_h
    meter.at = now


def write_progress(meter: WorkMeter) -> None:
    """The fraction done, in the job's progress file (as a job's own loop would write it), and
    its training state in its checkpoint folder, if it has one."""
    frac = min(1.0, meter.work_ref_h / meter.ref_hours)
    if meter.superseded or abs(frac - meter.written) < 0.001:
        return
    with contextlib.suppress(OSError):
        write_whole(meter.folder / "progress", f"{frac:.4f}\n")
        if meter.checkpoint is not None:
            meter.checkpoint.mkdir(parents=True, exist_ok=True)
            done = min(meter.work_ref_h, meter.ref_hours)
            write_whole(state_file(meter.checkpoint, meter.job), f"{done:.6f}\n")
        meter.written = frac


def write_whole(path: Path, text: str) -> None:
    """`text` in `path`, replaced whole, so that a reader never sees half of it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def release(meter: WorkMeter) -> None:
    """Let the job's end through: a writer opens the FIFO (on Linux O_RDWR never blocks), the
    name goes, and closing it gives the waiting reader its end of file."""
    if meter.released:
        return
    meter.released = True
    hold = meter.folder / "hold"
    try:
        fd = os.open(hold, os.O_RDWR | os.O_NONBLOCK)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            hold.unlink()
    finally:
        os.close(fd)
