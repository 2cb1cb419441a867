"""Costs every simulator-backed test and referee run pays, each as a ratio measured in one run (CPU,
this process's and its children's; the two ways interleaved, so a neighbour's load falls on both
alike):

- *a simulated host's SSH handshake*: a connect with rentwatch's own client options and key to a
  loopback sshd set up as the simulator's (`app/sim/ssh_hosts.py`: ed25519 host key, AES-GCM,
  public-key login), offering asyncssh's default key exchanges (ML-KEM768 with X25519 first) or
  `SIM_KEX` (curve25519-sha256, as an OpenSSH before 9.9 offers: docs/fidelity.md);
- *the offers' `min_bid` quotes*: every machine of a family-drawn market quoted once a market
  minute (as each instance list and offer search does), with the rivals drawn once and kept
  (`sim/bids.py` `_kept`: each machine's floor per window and its rivals) or drawn again at
  every quote, as before;
- *a command on a host*: `SSHRunner.run` to a loopback sshd set up as the simulator's, each
  command a session on the host's held connection (`engine/hosts/held.py`), or each on a
  connection of its own (the held one forgotten after every command, as every command was run
  before), both ends in this process;
- *a running job's status check on its host* (`engine/jobs/runner.py` `status_command`), run by
  `/bin/sh` on a job's folder: the exit code and the pid read by the shell's `read`, or by `cat`
  in command substitutions with the progress through `head | head` (five processes, as before).

Run: python -m bench.sim_costs [--handshakes 60] [--minutes 240] [--commands 200] [--checks 200]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import asyncssh
from rentwatch.core.campaign import Job
from rentwatch.engine.hosts.ssh import CLIENT_OPTIONS, SSHRunner
from rentwatch.engine.jobs.runner import job_dir, status_command
from rentwatch.sim import bids
from rentwatch.sim.clock import SimClock
from rentwatch.sim.family import draw_family
from rentwatch.sim.market import SimMarket
from rentwatch.sim.ssh_hosts import SIM_CIPHERS, SIM_KEX


class _Login(asyncssh.SSHServer):
    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return True


async def _handshakes(n: int, kex: Sequence[str] | None) -> float:
    """CPU seconds per connect-and-close, both ends in this process."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    extra = {} if kex is None else {"kex_algs": list(kex)}
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        server_factory=_Login,
        keepalive_interval=0,
        encryption_algs=SIM_CIPHERS,
        **extra,
    )
    port = server.sockets[0].getsockname()[1]

    async def one() -> None:
        conn = await asyncssh.connect("127.0.0.1", port, client_keys=[key], **CLIENT_OPTIONS)
        conn.close()
        await conn.wait_closed()

    try:
        await one()  # the first connect imports and builds what every later one reuses
        began = time.process_time()
        for _ in range(n):
            await one()
        return (time.process_time() - began) / n
    finally:
        server.close()
        await server.wait_closed()


def _answer(proc: asyncssh.SSHServerProcess[str]) -> None:
    proc.stdout.write("ok\n")
    proc.exit(0)


async def _commands(n: int, held: bool) -> float:
    """CPU seconds per `SSHRunner.run` of a command the host answers at once, both ends in this
    process: a session on the held connection, or (`held` False) a connection of its own."""
    server = await asyncssh.listen(
        "127.0.0.1",
        0,
        server_host_keys=[asyncssh.generate_private_key("ssh-ed25519")],
        server_factory=_Login,
        process_factory=_answer,
        keepalive_interval=0,
        encryption_algs=SIM_CIPHERS,
        kex_algs=SIM_KEX,
    )
    port = server.sockets[0].getsockname()[1]
    runner = SSHRunner(asyncssh.generate_private_key("ssh-ed25519"), keepalive_s=0)

    async def one() -> None:
        await runner.run(1, "127.0.0.1", port, "true")
        if not held:
            runner.forget(1)

    try:
        await one()  # the first connect imports and builds what every later one reuses
        began = time.process_time()
        for _ in range(n):
            await one()
        await runner.close()
        return (time.process_time() - began) / n
    finally:
        server.close()
        await server.wait_closed()


def _forking_status(job: Job) -> str:
    """The status check as it was: `cat` for the exit code and the pid, `head | head`."""
    d = job_dir(job.name)
    return (
        f"if [ -f {d}/exit ]; then echo EXIT $(cat {d}/exit); "
        f"elif [ -f {d}/pid ] && kill -0 $(cat {d}/pid) 2>/dev/null; then echo RUNNING; "
        f"elif [ -f {d}/pid ]; then echo VANISHED; else echo NONE; fi; "
        f'[ -f {d}/progress ] && echo "PROGRESS $(head -c 32 {d}/progress | head -n 1)"; '
        f"tail -c 1500 {d}/log 2>/dev/null"
    )


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _checks(command: str, n: int, home: Path) -> float:
    """CPU seconds per run of `command` by /bin/sh in `home` (the host's: its processes')."""
    env = {"HOME": str(home), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    began = _children_cpu()
    for _ in range(n):
        subprocess.run(["/bin/sh", "-c", command], env=env, stdout=subprocess.DEVNULL, check=True)
    return (_children_cpu() - began) / n


def _quotes(market: SimMarket, minutes: int) -> float:
    """CPU seconds to quote every machine once a market minute for `minutes`."""
    sc, t0 = market.scenario, market.clock.now()
    began = time.process_time()
    for i in range(minutes):
        for m in market.machines:
            bids.min_bid(sc.seed, sc.bids, m, t0 + 60.0 * i)
    return time.process_time() - began


def _drawn_afresh(run: Callable[[], float]) -> float:
    """`run` with every floor and rival drawn again at each quote."""
    kept = bids.floor_at, bids._rival
    bids.floor_at = lambda seed, b, m, t: bids._draw_floor(
        seed, b, m, math.floor(t / bids._window_s(b))
    )
    bids._rival = bids._draw_rival
    try:
        return run()
    finally:
        bids.floor_at, bids._rival = kept


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--handshakes", type=int, default=60, help="per way, in rounds of 10")
    ap.add_argument("--minutes", type=int, default=240, help="market minutes of quotes")
    ap.add_argument("--commands", type=int, default=200, help="per way, in rounds of 20")
    ap.add_argument("--checks", type=int, default=200, help="per way, in rounds of 20")
    args = ap.parse_args(argv)

    default, sim = [], []
    for _ in range(max(1, args.handshakes // 10)):
        default.append(asyncio.run(_handshakes(10, None)))
        sim.append(asyncio.run(_handshakes(10, SIM_KEX)))
    d, s = sum(default) / len(default), sum(sim) / len(sim)
    print(f"SSH handshake, CPU per connect (both ends), {len(default) * 10} each:")
    print(f"  asyncssh's default key exchange  {d * 1000:6.2f} ms")
    print(f"  SIM_KEX ({SIM_KEX[0]})  {s * 1000:6.2f} ms   ratio {s / d:.2f}")

    # market 0 of the family the referee's sized figures use (docs/benchmarks.md)
    scenario = draw_family(515151, 1)[0].scenario
    clock = SimClock(1.0, origin=1768953600.0)
    clock.stepped()
    market = SimMarket(scenario, clock, api_key="bench")
    fresh, kept = 0.0, 0.0
    for _ in range(3):
        fresh += _drawn_afresh(lambda: _quotes(market, args.minutes))
        bids._KEPT.clear()
        kept += _quotes(market, args.minutes)
    n = len(market.machines)
    print(f"min_bid quotes of {n} machines, once a market minute for {args.minutes} min (x3):")
    print(f"  drawn at every quote  {fresh:6.2f} s CPU")
    print(f"  drawn once, kept      {kept:6.2f} s CPU   ratio {kept / fresh:.2f}")

    own, on_held = [], []
    for _ in range(max(1, args.commands // 20)):
        own.append(asyncio.run(_commands(20, held=False)))
        on_held.append(asyncio.run(_commands(20, held=True)))
    o, h = sum(own) / len(own), sum(on_held) / len(on_held)
    print(f"A command over SSH, CPU per command (both ends), {len(own) * 20} each:")
    print(f"  a connection of its own      {o * 1000:6.2f} ms")
    print(f"  a session on the held one    {h * 1000:6.2f} ms   ratio {h / o:.2f}")

    job = Job(name="bench", run="true")
    forking, reading = 0.0, 0.0
    rounds = max(1, args.checks // 20)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / job_dir(job.name).removeprefix("~/")
        folder.mkdir(parents=True)
        (folder / "pid").write_text(f"{os.getpid()}\n")  # running: this process
        (folder / "progress").write_text("0.4523\n")
        (folder / "log").write_text("step 1\n" * 400)
        for _ in range(rounds):
            forking += _checks(_forking_status(job), 20, Path(tmp))
            reading += _checks(status_command(job), 20, Path(tmp))
    f, r = forking / rounds, reading / rounds
    print(f"A running job's status check on its host, CPU per check, {rounds * 20} each:")
    print(f"  cat and head | head (as before)  {f * 1000:6.2f} ms")
    print(f"  the shell's read                 {r * 1000:6.2f} ms   ratio {r / f:.2f}")


if __name__ == "__main__":
    main()
