"""Two costs every simulator-backed test and referee run pays, each as a ratio measured in one run
(CPU, this process's; the two ways interleaved, so a neighbour's load falls on both alike):

- *a simulated host's SSH handshake*: a connect with rentwatch's own client options and key to a
  loopback sshd set up as the simulator's (`app/sim/ssh_hosts.py`: ed25519 host key, AES-GCM,
  public-key login), offering asyncssh's default key exchanges (ML-KEM768 with X25519 first) or
  `SIM_KEX` (curve25519-sha256, as an OpenSSH before 9.9 offers: docs/fidelity.md);
- *the offers' `min_bid` quotes*: every machine of a family-drawn market quoted once a market
  minute (as each instance list and offer search does), with the rivals drawn once and kept
  (`sim/bids.py` `_kept`: each machine's floor per window and its rivals) or drawn again at
  every quote, as before.

Run: python -m bench.sim_costs [--handshakes 60] [--minutes 240]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Callable, Sequence

import asyncssh
from rentwatch.engine.hosts.ssh import CLIENT_OPTIONS
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


if __name__ == "__main__":
    main()
