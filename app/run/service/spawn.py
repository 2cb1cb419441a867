"""A controller in a process of its own, and this dashboard attached to it: what `watch` and `demo`
do by default, what `run --background` does without the dashboard, and what `attach` does.
Quitting asks whether to stop the campaign or leave it running for a later `attach`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...ledger.store import HELD_ELSEWHERE
from . import api, registry
from .controller import READY_S
from .remote import ControllerClient, RemoteEngine
from .target import Target

# a controller registers itself within this many wall seconds, or it failed: its engine's
# wait to be up and served, and a margin for its start (imports, the ledger, a demo's market)
START_S = READY_S + 30.0
STOP_S = 300.0  # how long quitting with "stop" waits for the controller to release and exit


class ControllerFailed(api.ServiceError):
    title = "controller"


@dataclass
class Started:
    entry: registry.Entry
    proc: subprocess.Popen[bytes]
    log: Path


def _last_words(log: Path, since: int) -> str:
    """The last ten lines this controller wrote to `log` (from byte `since`: earlier runs' too
    are there)."""
    try:
        with log.open("rb") as f:
            f.seek(since)
            tail = f.read().decode(errors="replace").splitlines()[-10:]
    except OSError:
        return ""
    said = [ln.removeprefix("rentwatch: ") for ln in tail if ln.startswith("rentwatch:")]
    return "\n".join(said or tail)  # its one-line errors first, said once with ours


def spawn_controller(
    argv: list[str],
    ledger: Path,
    env: dict[str, str] | None = None,
    monotonic: Callable[[], float] = time.monotonic,
) -> Started:
    """Start `rentwatch ARGV...` in its own session (no SIGHUP when this terminal goes), its
    output appended to `LEDGER.log` (0600); return once it has registered its socket."""
    ledger.parent.mkdir(parents=True, exist_ok=True)
    log = ledger.with_name(ledger.name + ".log")
    fd = os.open(log, os.O_CREAT | os.O_APPEND | os.O_WRONLY, 0o600)
    since = os.fstat(fd).st_size
    with os.fdopen(fd, "a") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rentwatch", *argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env or os.environ, PYTHONUNBUFFERED="1"),
            start_new_session=True,
            cwd=str(ledger.parent),
        )
    deadline = monotonic() + START_S
    while monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise ControllerFailed(
                f"the controller exited with {code} before serving: "
                f"{_last_words(log, since) or 'no output'} (log: {log})"
            )
        mine = [e for e in registry.live_entries() if e.pid == proc.pid]
        if mine:
            return Started(mine[0], proc, log)
        time.sleep(0.1)
    # it may still come up and rent with nobody attached: end it (its exit trap releases
    # whatever it came to hold before it exits)
    proc.terminate()
    raise ControllerFailed(
        f"pid {proc.pid} did not answer within {START_S:.0f} s: sent it SIGTERM, so it "
        f"releases whatever it holds and exits; log: {log}"
    )


def _is_local(target: Target, pid: int) -> bool:
    """Whether the controller at `target` runs on this machine (registered here with `pid`):
    over a forwarded socket or TCP its pid names a process on another machine."""
    found = registry.find(socket_path=target.socket, quiet=True) if target.socket else []
    return any(e.pid == pid for e in found)


def _wait_gone(
    target: Target,
    pid: int | None,
    proc: subprocess.Popen[bytes] | None,
    timeout: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> bool:
    """Whether the controller finished within `timeout`: our child ended; or its process or its
    registry entry went (removed only once it released all); or (remote) its API went quiet."""
    if proc is not None:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    deadline = monotonic() + timeout
    while monotonic() < deadline:
        if pid is not None:
            if not registry.pid_alive(pid):
                return True
            listed = any(e.pid == pid for e in registry.live_entries())
            if not listed and not (target.socket and registry.socket_answers(target.socket)):
                return True
        else:
            with ControllerClient(target, timeout=5.0) as client:
                try:
                    client.status()
                except api.ServiceError:
                    return True
        time.sleep(0.2)
    return False


def _attach_args(target: Target, local: bool) -> str | None:
    """What `rentwatch attach` needs to find the controller again; None: a controller on this
    machine that no longer serves (its registry entry went: it has ended, or is ending)."""
    if local:
        found = registry.find(socket_path=target.socket, quiet=True)
        # the pid too: another controller may run a campaign of the same name
        return f"--campaign {found[0].campaign} --pid {found[0].pid}" if found else None
    if target.socket:
        return f"--socket {target.socket}"
    return f"--url {target.url} --token-file FILE"


def attach_dashboard(
    target: Target, proc: subprocess.Popen[bytes] | None = None, wait_s: float = STOP_S
) -> tuple[Any, Callable[[str | None], int]]:
    """The dashboard as a client of the controller at `target`. Returns the app and what to
    call once it has quit, with the quit dialog's choice; that returns the exit code."""
    from rentwatch.widgets.app import RentwatchApp

    with ControllerClient(target, timeout=5.0) as client:
        status = client.status()  # fail here, plainly, rather than in an empty dashboard
    campaign, pid = str(status["campaign"]), int(status["pid"])
    local = _is_local(target, pid)  # its pid means something here: its death can be told
    engine = RemoteEngine(target, pid=pid if local else None)
    ledger = ControllerClient(target, timeout=600.0)  # a ledger screen's query may be long
    app = RentwatchApp(engine, ledger)

    def finish(result: str | None) -> int:
        if result == "leave":  # chosen: a demo left this way does not end itself unwatched
            with contextlib.suppress(api.ServiceError), ControllerClient(target, 5.0) as keeper:
                keeper.keep()
        if engine.alive():
            engine.shutdown("leave")  # a crashed dashboard never stops a campaign
        ledger.close()
        if result != "stop":
            where = f"pid {pid}" if local else target.describe()
            again = _attach_args(target, local)
            if again is None:
                state = "is ending" if registry.pid_alive(pid) else "has ended"
                print(
                    f"rentwatch: the controller of {campaign} ({where}) no longer serves: it "
                    f"{state}; ledger at {status.get('ledger')}"
                )
                return 0
            print(f"rentwatch: left {campaign} running in the background ({where})")
            print(f"rentwatch: re-attach with: rentwatch attach {again}")
            return 0
        if engine.stop_error:
            print(f"rentwatch: could not stop {campaign}: {engine.stop_error}", file=sys.stderr)
            return 1
        print(f"rentwatch: stopping {campaign}: verified instances stopped, the rest destroyed…")
        if not _wait_gone(target, pid if local else None, proc, wait_s):
            print(
                f"rentwatch: the controller of {campaign} is still releasing after "
                f"{wait_s:.0f} s; `rentwatch ls` lists it until it is done",
                file=sys.stderr,
            )
            return 1
        print(f"rentwatch: {campaign} stopped; ledger at {status.get('ledger')}")
        return 0

    return app, finish


def connect(
    argv: list[str],
    ledger: Path,
    campaign: str | None,
    env: dict[str, str] | None = None,
) -> tuple[Target, subprocess.Popen[bytes] | None]:
    """Start `rentwatch controller ARGV...` on `ledger`, or use the controller that already holds it
    (for `demo` any demo, for `watch` the same campaign), or say which one holds it."""
    held = registry.find(ledger=ledger, quiet=True)
    if held:
        entry = held[0]
        if campaign is not None and entry.campaign != campaign:
            raise ControllerFailed(
                f"{ledger} is held by the controller of campaign {entry.campaign!r} "
                f"(pid {entry.pid}): `rentwatch attach --pid {entry.pid}`, "
                "or give this one another --ledger"
            )
        print(f"rentwatch: {entry.campaign} is already running (pid {entry.pid}); attaching")
        return Target(socket=entry.socket), None
    print("rentwatch: starting the controller…", flush=True)
    try:
        started = spawn_controller(["controller", *argv, "--ledger", str(ledger)], ledger, env)
    except ControllerFailed as exc:
        # two started within a second: the other one opened the ledger (or served its socket)
        # first and had not registered yet when this one looked; once it has, attach to it
        if HELD_ELSEWHERE not in str(exc) and "already answers" not in str(exc):
            raise
        holder = _holder(ledger, campaign)
        if holder is None:
            raise
        print(f"rentwatch: {holder.campaign} started meanwhile (pid {holder.pid}); attaching")
        return Target(socket=holder.socket), None
    return Target(socket=started.entry.socket), started.proc


def _holder(ledger: Path, campaign: str | None) -> registry.Entry | None:
    for _ in range(75):  # for 15 s
        for entry in registry.find(ledger=ledger, quiet=True):
            if campaign is None or entry.campaign == campaign:
                return entry
        time.sleep(0.2)
    return None


def run_attached(
    argv: list[str], ledger: Path, campaign: str | None, env: dict[str, str] | None = None
) -> int:
    target, proc = connect(argv, ledger, campaign, env)
    # the line `connect` printed is hidden by the dashboard until it quits: say it there too
    notice = (
        None
        if proc is not None
        else "attached to the controller already running on this ledger: it keeps its own "
        "settings (options given here, if any, do not apply); another one needs another --ledger"
    )
    return run_dashboard(target, proc, notice)


def run_dashboard(
    target: Target, proc: subprocess.Popen[bytes] | None = None, notice: str | None = None
) -> int:
    app, finish = attach_dashboard(target, proc)
    app.notice = notice
    result = None
    try:
        result = app.run()
    finally:
        code = finish(result)
    return code
