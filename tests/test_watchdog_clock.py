"""The host watchdog judges its window in market time: wall time on a real host, the
simulator's own clock on a simulated one. Found under load: a simulated market's clock held or
slowed (the referee's pacing) while wall time went on let a watchdog armed with a wall window
(market window over the scale at arming) stop a healthy host whose controller beat it on time
in market seconds."""

from __future__ import annotations

import asyncio
import os
import time

import asyncssh
from rentwatch.engine.hosts.probe_io import probe_source, watchdog_command
from rentwatch.market.vast.client import VastClient
from rentwatch.probes import watchdog

from .conftest import market_stands

HOUR = 3600.0


def _beat(tmp_path, age_wall_s: float = 0.0):
    beat = tmp_path / "heartbeat"
    beat.touch()
    t = time.time() - age_wall_s
    os.utime(beat, (t, t))
    return str(beat), str(tmp_path / "standdown")


def test_on_a_real_host_silence_is_wall_time_since_the_touch(tmp_path):
    beat, down = _beat(tmp_path, age_wall_s=HOUR)
    said: list[str] = []
    assert watchdog.silence_watch(beat, down, 900, 0, said.append, rounds=1) == "silent"
    assert said and said[0].startswith("heartbeat silent for 3600 s")
    os.utime(beat)  # a fresh beat
    assert watchdog.silence_watch(beat, down, 900, 0, said.append, rounds=3) == "watching"
    (tmp_path / "standdown").touch()
    assert watchdog.silence_watch(beat, down, 900, 0, said.append, rounds=3) == "stand-down"


def test_on_a_simulated_host_silence_is_market_time(tmp_path):
    beat, down = _beat(tmp_path, age_wall_s=HOUR)  # an hour of wall time: no market time
    clock = tmp_path / "market_clock"
    clock.write_text("1000000.0\n")
    now = watchdog.sim_clock(str(clock))
    said: list[str] = []
    # the market's clock stands (held by a referee, a box that gave the market no CPU)
    assert watchdog.silence_watch(beat, down, 900, 0, said.append, now, rounds=50) == "watching"

    def ticking(touch_at: set[int]):
        """A sleep that moves the market 100 s a check, touching the beat at those checks."""
        n = [0]

        def sleep(_: float) -> None:
            n[0] += 1
            clock.write_text(f"{1000000.0 + 100 * n[0]}\n")
            if n[0] in touch_at:
                t = time.time() - HOUR + n[0]  # a new mtime, still an hour old in wall time
                os.utime(beat, (t, t))

        return sleep, n

    sleep, n = ticking(set())
    assert watchdog.silence_watch(beat, down, 900, 0, said.append, now, sleep) == "silent"
    assert n[0] == 10 and said[-1] == "heartbeat silent for 1000 s: stopping the instance"
    # beats every 800 market seconds keep it watching; the first silence past 900 stops it
    sleep, n = ticking({8, 16, 24})
    assert watchdog.silence_watch(beat, down, 900, 0, said.append, now, sleep) == "silent"
    assert n[0] == 24 + 10
    # an unreadable clock is the last time read: never a reason to stop
    clock.write_text("garbage")
    sleep_no = lambda _: None  # noqa: E731
    assert watchdog.silence_watch(beat, down, 1, 0, said.append, now, sleep_no, 5) == "watching"


def test_the_watchdog_takes_the_simulators_clock_where_its_host_names_one(tmp_path, monkeypatch):
    armed: list[tuple[float, object]] = []

    def watch(beat, down, window, check, log, now=None):
        armed.append((window, now and now()))
        return "stand-down"

    monkeypatch.setattr(watchdog, "silence_watch", watch)
    monkeypatch.setattr(watchdog, "watch_xids", lambda *a: None)
    monkeypatch.setenv("CONTAINER_ID", "7")
    monkeypatch.setenv("CONTAINER_API_KEY", "k")
    args = ["--dir", str(tmp_path / "rw"), "--window-s", "900", "--scale", "300"]
    monkeypatch.delenv(watchdog.SIM_CLOCK_ENV, raising=False)
    assert watchdog.main(args) == 0
    (tmp_path / "clock").write_text("123.5\n")
    monkeypatch.setenv(watchdog.SIM_CLOCK_ENV, str(tmp_path / "clock"))
    assert watchdog.main(args) == 0
    # a real host: 900 market s are 3 wall s at 300x; a simulated one: 900 of its own seconds
    assert armed == [(3.0, None), (900.0, 123.5)]


def test_a_held_market_clock_holds_a_simulated_hosts_watchdog(make_sim):
    """The real watchdog on a simulated host, its heartbeat an hour old in wall time, its
    market clock held: the host stops itself only a window of market time after the clock
    runs again. Judged in wall time (the window over the scale), it stopped at once, at the
    held market time."""
    sim = make_sim(seed=4, offers=4, time_scale=3000, ssh={"container_env": 1.0})
    key = asyncssh.generate_private_key("ssh-ed25519")
    window = HOUR  # 1.2 wall seconds at 3000x
    iid = 0

    async def stopped_at() -> float | None:
        return await asyncio.to_thread(sim.call, lambda: sim.market.instances[iid].segments[-1].end)

    async def run() -> tuple[float, float, float]:
        nonlocal iid
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            await c.add_ssh_key(key.export_public_key().decode())
            offer = (await c.search_offers({}))[0]
            iid = (await c.create_instance(offer.id, image="img", disk_gb=10)).instance_id
            for _ in range(600):  # a ceiling on a hang only
                inst = await c.show_instance(iid)
                if inst and inst.status == "running" and inst.ssh_port:
                    break
                await asyncio.sleep(0.1)
            home = await asyncio.to_thread(
                sim.call, lambda: sim.ssh.sandbox(sim.market.instances[iid])
            )
            stands = market_stands(sim)
            await asyncio.to_thread(stands.__enter__)
            held = await asyncio.to_thread(sim.call, sim.market.clock.now)
            async with asyncssh.connect(
                inst.ssh_host, inst.ssh_port, username="root", client_keys=[key], known_hosts=None
            ) as conn:
                r = await conn.run(
                    watchdog_command(window, 3000), input=probe_source("watchdog").decode()
                )
                assert r.exit_status == 0, r.stderr
            old = time.time() - HOUR
            os.utime(home / ".rentwatch" / "heartbeat", (old, old))
            log = home / ".rentwatch" / "watchdog.log"
            for _ in range(600):  # armed, and some checks since (a wall watchdog stops now)
                if "armed" in (log.read_text() if log.exists() else ""):
                    break
                await asyncio.sleep(0.05)
            for _ in range(20):  # (the market's API paces calls in market time: it stands)
                if await stopped_at() is not None:
                    break
                await asyncio.sleep(0.05)
            released = await asyncio.to_thread(sim.call, sim.market.clock.now)
            await asyncio.to_thread(stands.__exit__, None, None, None)
            for _ in range(1200):
                if await stopped_at() is not None:
                    break
                await asyncio.sleep(0.05)
            end = await stopped_at()
            assert end is not None, log.read_text()
            return held, released, end

    held, released, stopped = asyncio.run(run())
    assert released - held < 60  # the clock stood while the watchdog watched
    assert stopped >= released + window, (held, released, stopped)
