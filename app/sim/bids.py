"""The interruptible tier (docs/fidelity.md): each machine's drifting min_bid floor, its rivals,
outbids and resumes, as pure functions of (seed, machine, time) and `[bids]`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from .machines import Machine, keyed_rng
from .rental import SimInstance
from .scenario import Bids

TICK = 0.001  # $/h: the step a bid must clear a rival's by


@dataclass(frozen=True)
class Rival:
    start: float
    end: float
    bid: float | None  # None: rented on-demand


def _window_s(b: Bids) -> float:
    return b.window_min * 60.0


def floor_at(seed: int, b: Bids, m: Machine, t: float) -> float:
    """The machine's min_bid floor at `t` ($/h), its own draw moved by the window's drift."""
    return _floor(seed, b, m.id, m.dph_base, math.floor(t / _window_s(b)))


# Every instance list and offer search quotes every machine, and a quote walks the last few
# hours' windows: each draw (a SHA-256 and a seeded generator) is kept.
@lru_cache(maxsize=50_000)
def _floor(seed: int, b: Bids, machine_id: int, dph_base: float, k: int) -> float:
    rng = keyed_rng(seed, "bid-floor", machine_id)
    share = rng.uniform(*b.floor)
    if b.near_share > 0 and rng.random() < b.near_share:
        share = rng.uniform(*b.near)  # a host whose floor sits at or near its on-demand price
    move = keyed_rng(seed, "bid-drift", machine_id, k).uniform(-1.0, 1.0) * b.drift
    return dph_base * share * (1.0 + move)


def pressure_at(b: Bids, gpu: str, t: float) -> float:
    """Rivals per machine-hour at `t`: the model's pressure, swinging over the UTC day."""
    hour = (t % 86400.0) / 3600.0
    swing = 1.0 + b.day_swing * math.cos(2 * math.pi * (hour - b.peak_hour) / 24.0)
    return b.pressure_for(gpu) * max(0.0, swing)


@lru_cache(maxsize=50_000)
def _rival(seed: int, b: Bids, machine_id: int, dph_base: float, gpu: str, k: int) -> Rival | None:
    w = _window_s(b)
    rng = keyed_rng(seed, "bid-rival", machine_id, k)
    p = 1.0 - math.exp(-pressure_at(b, gpu, (k + 0.5) * w) * w / 3600.0)
    if rng.random() >= p:
        return None
    start = k * w + rng.random() * w
    hold = rng.uniform(*b.hold_min) * 60.0
    if rng.random() < b.ondemand:
        return Rival(start, start + hold, None)
    floor = _floor(seed, b, machine_id, dph_base, math.floor(start / w))
    return Rival(start, start + hold, floor * rng.uniform(*b.rival_bid))


def rivals(seed: int, b: Bids, m: Machine, lo: float, hi: float) -> list[Rival]:
    w = _window_s(b)
    back = math.ceil(b.hold_min[1] * 60.0 / w) + 1
    out = []
    for k in range(math.floor(lo / w) - back, math.floor(hi / w) + 1):
        r = _rival(seed, b, m.id, m.dph_base, m.advertised_gpu, k)
        if r is not None and r.end > lo and r.start <= hi:
            out.append(r)
    return out


def need(seed: int, b: Bids, m: Machine, t: float) -> float | None:
    """What a bid must reach to hold the machine at `t` ($/h); None while held on-demand."""
    top = floor_at(seed, b, m, t)
    for r in rivals(seed, b, m, t, t):
        if not r.start <= t < r.end:
            continue
        if r.bid is None:
            return None
        top = max(top, r.bid + TICK)
    return top


def quote(seed: int, b: Bids, m: Machine, t: float) -> float | None:
    """The offer's `min_bid` at `t`: the need, rounded up so a bid of it wins; None while a rival
    holds the machine on-demand. It may exceed the on-demand price (public bid prices reach 3x
    on-demand: docs/fidelity.md)."""
    n = need(seed, b, m, t)
    if n is None:
        return None
    return math.ceil(max(n, 0.001) * 1e6 - 1e-6) / 1e6


def min_bid(seed: int, b: Bids, m: Machine, t: float) -> float:
    q = quote(seed, b, m, t)
    return round(m.dph_base, 6) if q is None else q


def wins(seed: int, b: Bids, m: Machine, t: float, bid: float) -> bool:
    n = need(seed, b, m, t)
    return n is not None and bid + 1e-9 >= n


def changes(seed: int, b: Bids, m: Machine, lo: float, hi: float) -> list[float]:
    """The moments in (lo, hi] at which a bid's need may change: window edges, rivals."""
    w = _window_s(b)
    out = {k * w for k in range(math.floor(lo / w) + 1, math.floor(hi / w) + 1)}
    for r in rivals(seed, b, m, lo, hi):
        out.update(p for p in (r.start, r.end) if lo < p <= hi)
    return sorted(out)


def paid(seed: int, b: Bids, m: Machine, t: float, bid: float) -> float:
    """What a winning bid pays per hour at `t`: its own bid (`pricing = "bid"`), or what it had
    to beat then, never above itself (`"clearing"`)."""
    if b.pricing != "clearing":
        return bid
    n = need(seed, b, m, t)
    return bid if n is None else min(bid, round(n, 6))


def reprice(seed: int, b: Bids, inst: SimInstance, t: float) -> None:
    """Under clearing prices, a new price mark where what the rental pays has moved."""
    if b.pricing != "clearing" or inst.bid is None:
        return
    price = paid(seed, b, inst.machine, t, inst.bid)
    if inst.prices[-1][1] != price:
        inst.prices.append((t, price))


def pause(inst: SimInstance, at: float, outbid: bool = True) -> None:
    """Outbid at `at` (or, `outbid` false, created or started with a bid that does not win):
    stopped there (its processes die with the container), data kept, waiting for priority."""
    seg = inst.segments[-1]
    if seg.end is None:
        seg.end = at
    inst.paused_at = at
    (inst.outbids if outbid else inst.lost_bids).append(at)


def settle(
    seed: int,
    b: Bids,
    inst: SimInstance,
    now: float,
    resume: Callable[[SimInstance, float], None],
) -> None:
    """Walk one bid rental up to `now`: outbid where its bid stops winning while it runs, resumed
    where it wins again while it waits. A rental stopped by its renter or the contract's end is
    not the market's to resume."""
    if inst.bid is None or inst.destroyed_at is not None or now <= inst.bid_seen:
        inst.bid_seen = max(inst.bid_seen, now)
        return
    m = inst.machine
    points = changes(seed, b, m, inst.bid_seen, now)
    for p in points:
        won = wins(seed, b, m, p, inst.bid)
        running = inst.segments[-1].end is None
        if running and not won:
            pause(inst, p)
        elif inst.paused_at is not None and won:
            if m.contract_end is not None and p >= m.contract_end:
                inst.paused_at = None  # the contract is over: nothing resumes
                break
            inst.paused_at = None
            inst.resumes.append(p)
            resume(inst, p)
        if won:
            reprice(seed, b, inst, p)
    inst.bid_seen = now
