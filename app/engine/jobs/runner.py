"""Running jobs on hosts: detached (they survive a dropped session or a restart), their state read
back from files on the host; the paths a job's files may take, and its checkpoint pushed back."""

from __future__ import annotations

import math
import posixpath
import shlex
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from ...core.campaign import Job, home_path, inside_job_folder
from ...core.errors import RentwatchError

JOB_ROOT = "~/.rentwatch/jobs"


class UnsafePath(RentwatchError):
    title = "unsafe path"


def job_dir(name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:64]
    return f"{JOB_ROOT}/{safe}"


def job_env(job: Job) -> dict[str, str]:
    """What a job finds in its environment besides its own `env` (docs/campaigns.md): its folder,
    its progress file and, for a sized job, its size. Values are shell words."""
    home_dir = '"' + job_dir(job.name).replace("~", "$HOME", 1) + '"'
    env = {
        "RENTWATCH_JOB_DIR": home_dir,
        "RENTWATCH_PROGRESS": home_dir[:-1] + '/progress"',
    }
    if job.ref_gpu and job.ref_hours:
        env["RENTWATCH_REF_GPU"] = shlex.quote(job.ref_gpu)
        env["RENTWATCH_REF_HOURS"] = f"{job.ref_hours:g}"
    if job.checkpoint:
        env["RENTWATCH_CHECKPOINT"] = checkpoint_word(job)
    return env


def checkpoint_path(job: Job) -> str:
    """The job's checkpoint on the host: absolute, or from $HOME (as a relative workdir)."""
    assert job.checkpoint is not None
    return home_path(job.workdir, job.checkpoint.rstrip("/"))


def checkpoint_word(job: Job) -> str:
    """The job's checkpoint path as a shell word: where it saves its state and, on a retry,
    finds the state pulled off its last host."""
    path = checkpoint_path(job)
    return shlex.quote(path) if path.startswith("/") else '"$HOME"/' + shlex.quote(path)


def stale_command(job: Job) -> str:
    """The job's artifact files on this host unchanged since the job first started here: another
    job's, in a shared workdir. By ctime, which `tar x` or `cp -p` cannot set back, unlike mtime.
    Nothing where there is no mark."""
    mark = f"{job_dir(job.name)}/started"
    paths = " ".join(shlex.quote(safe_relative(a.rstrip("/") or ".")) for a in job.artifacts)
    return (
        f"cd {shlex.quote(job.workdir)} && [ -f {mark} ] && "
        f"find {paths} -type f ! -cnewer {mark} -print0 2>/dev/null; true"
    )


def parse_stale(out: bytes) -> frozenset[str]:
    """`stale_command`'s answer as the artifact paths `fetch_artifacts` records."""
    names = out.decode("utf-8", errors="replace").split("\0")
    return frozenset(posixpath.normpath(n) for n in names if n and not n.startswith("/"))


# A file's change time comes from a coarse clock (the kernel's tick, 1-10 ms), so output that a
# quick job writes in the tick of its start mark reads "unchanged since the job started" and is
# left behind as another's (one CI run in many: a one-line job's only artifact). The launch waits
# a tick out after the mark; `sleep 1` where a shell's sleep takes no fraction.
TICK_WAIT = "{ sleep 0.02 2>/dev/null || sleep 1; }"


def launch_command(job: Job, first: bool = True) -> str:
    """Start the job detached; its exit code lands in a file when it ends. A FIFO named `hold` in
    its folder holds a finished job's exit (the simulated host's way of billing a sized job's
    compute). A first attempt marks its start afresh; a retry keeps the mark."""
    d = job_dir(job.name)
    touch = f"touch {d}/started && {TICK_WAIT}"
    mark = touch if first else f"{{ [ -f {d}/started ] || {{ {touch}; }}; }}"
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in job.env.items() if k.isidentifier())
    inner = f"cd {shlex.quote(job.workdir)} && {env + ' ' if env else ''}{job.run}"
    # a newline, not ';': the command may end in a heredoc
    script = (
        f"{inner}\ncode=$?\n"
        f"[ $code = 0 ] && [ -p {d}/hold ] && cat {d}/hold > /dev/null 2>&1\n"
        f"echo $code > {d}/exit.tmp && mv {d}/exit.tmp {d}/exit"
    )
    exports = " ".join(f"{k}={v}" for k, v in job_env(job).items())
    return (
        f"mkdir -p {d} && rm -f {d}/exit {d}/progress && {mark} && (export {exports}; "
        f"setsid nohup sh -c {shlex.quote(script)} "
        f"> {d}/log 2>&1 < /dev/null & echo $! > {d}/pid)"
    )


def status_command(job: Job) -> str:
    """The job's state, its progress and its log's tail, in one answer (`parse_status`). The exit
    code and the pid are read by the shell's own `read` and printed by its `printf` (no escapes
    taken from the files); only the progress (at most its first 32 bytes: the job writes it,
    and it may hold anything) and the log's tail start a process on the host."""
    d = job_dir(job.name)
    return (
        f"if [ -f {d}/exit ]; then read -r c _ < {d}/exit; printf 'EXIT%s\\n' \"${{c:+ $c}}\"; "
        f'elif [ -f {d}/pid ] && {{ read -r p _ < {d}/pid; kill -0 "$p"; }} 2>/dev/null; '
        f"then echo RUNNING; "
        f"elif [ -f {d}/pid ]; then echo VANISHED; else echo NONE; fi; "
        f"[ -f {d}/progress ] && {{ p=$(head -c 32 {d}/progress); nl='\n'; "
        f'printf \'PROGRESS %s\\n\' "${{p%%"$nl"*}}"; }}; '
        f"tail -c 1500 {d}/log 2>/dev/null"
    )


@dataclass(frozen=True)
class JobStatus:
    state: str  # running, exited, vanished, none
    exit_code: int | None
    log_tail: str
    progress: float | None = None  # what the job last wrote to its progress file (0..1)


def parse_progress(text: str) -> float | None:
    """A progress file's fraction from 0 to 1 (a percentage up to 100 is read as one), else None."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        return None
    if not math.isfinite(value) or not 0 <= value <= 100:
        return None
    return value / 100 if value > 1 else value


def parse_status(out: bytes) -> JobStatus:
    text = out.decode("utf-8", errors="replace")
    first, _, rest = text.partition("\n")
    progress = None
    if rest.startswith("PROGRESS"):
        line, _, rest = rest.partition("\n")
        progress = parse_progress(line.removeprefix("PROGRESS"))
    words = first.split()
    if words[:1] == ["EXIT"]:
        try:
            code = int(words[1])
        except (IndexError, ValueError):
            code = -1
        return JobStatus("exited", code, rest, progress)
    state = {"RUNNING": "running", "VANISHED": "vanished"}.get(first.strip(), "none")
    return JobStatus(state, None, rest, progress)


def safe_relative(path: str) -> str:
    """An artifact path must stay inside the job's folder on both ends (the campaign's rule)."""
    if not inside_job_folder(path):
        raise UnsafePath(f"artifact path {path!r} is not a relative path inside the job's folder")
    return posixpath.normpath(path)


async def push_checkpoint(
    conn: asyncssh.SSHClientConnection, job: Job, src_root: Path
) -> list[str]:
    """Put the last fetched checkpoint back under the job's folder on a new host."""
    assert job.checkpoint is not None
    rel = safe_relative(job.checkpoint.rstrip("/"))
    local_base = src_root / rel
    files = (
        [local_base]
        if local_base.is_file()
        else sorted(p for p in local_base.rglob("*") if p.is_file())
    )
    pushed = []
    async with conn.start_sftp_client() as sftp:
        for path in files:
            if path.is_symlink():
                continue
            sub = path.relative_to(src_root).as_posix()
            remote = posixpath.join(job.workdir, safe_relative(sub))
            parent = posixpath.dirname(remote)
            if parent and parent != ".":
                await sftp.makedirs(parent, exist_ok=True)
            await sftp.put(str(path), remote)
            pushed.append(sub)
    return pushed


def stop_command(job: Job) -> str:
    d = job_dir(job.name)
    return f"[ -f {d}/pid ] && kill -TERM -$(cat {d}/pid) 2>/dev/null; kill -TERM $(cat {d}/pid) 2>/dev/null; true"
