"""A plan before the meter starts: what a campaign's job set is expected to cost and how long it
takes, as a range, from the policy's own odds. Pure (the draws come from a seeded generator).

Each draw plays the campaign out as the engine would run it, from `decide()`'s first creates.
What the policy cannot know is drawn too (the market's odds, dud lives, host speeds, outbids,
what a winning bid pays), so the range is honest about it. The floor is the job set on the
cheapest listed machine-hours; the referee's floor reads the simulator's truth instead."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .bidding.tier import RESUME_H

DRAWS = 400


@dataclass(frozen=True)
class Candidate:
    """One offer as the plan plays it: in the order the rules would rent them."""

    usd_per_h: float  # what it bills an hour running: its GPU at the create's price, storage
    storage_per_h: float
    rate: float  # reference GPU-hours it is expected to deliver an hour
    p: float  # p(deliver), as the ranking reads it
    full_rate: float = 0.0  # the rate at its model's full speed, the most it delivers (0: `rate`)
    outbid_per_h: float = 0.0  # 0: on-demand
    ckpt_h: float = 0.0  # the checkpoint interval on the tier (hours)
    outbid_usd: float = 0.0  # what one outbid costs beside the work it loses
    floor_per_h: float = 0.0  # the least it lists at an hour (GPU and storage), for the floor
    beat_per_h: float | None = None  # on the tier: what its bid beats an hour (bid_floor, storage)

    @property
    def top(self) -> float:
        return max(self.rate, self.full_rate)


@dataclass(frozen=True)
class PlanInputs:
    candidates: tuple[Candidate, ...]
    jobs_ref_h: tuple[float, ...]  # sized jobs, reference GPU-hours each
    hosts: int  # proven hosts the work holds at once (the fleet, at most one per job)
    first: int  # creates in the first round
    boot_h: float  # market hours a proven host bills before it works (boot, preflight)
    dud_h: float  # market hours a dud bills before the rules give up on it
    tail_h: float  # hours a host bills after its last job, before it is stopped
    odds_runs: float  # how many runs' worth of evidence the odds stand on (their strength)
    # the GPU bills from the create (the what-if), not only while running (Vast's rule)
    gpu_from_create: bool = False
    max_creates: int = 10_000  # creates left to the campaign: the engine gives up after them


@dataclass(frozen=True)
class Plan:
    cost_usd: tuple[float, float, float]  # p10, median, p90
    hours: tuple[float, float, float]
    floor_usd: float
    creates: tuple[float, float, float]  # creates expected, duds included
    draws: int

    def json(self) -> dict[str, object]:
        def rng(t: tuple[float, float, float], d: int) -> dict[str, float | None]:
            def r(x: float) -> float | None:  # never: no host proven in that share of draws
                return round(x, d) if math.isfinite(x) else None

            return {"p10": r(t[0]), "median": r(t[1]), "p90": r(t[2])}

        return {
            "cost_usd": rng(self.cost_usd, 4),
            "hours": rng(self.hours, 3),
            "creates": rng(self.creates, 1),
            "floor_usd": round(self.floor_usd, 4),
            "draws": self.draws,
        }


def floor_usd(inputs: PlanInputs) -> float:
    """The job set on the cheapest listed machine-hours per reference hour, one boot's
    storage at the least: no policy pays less for this work on these listings."""
    if not inputs.candidates:
        return 0.0
    work = sum(inputs.jobs_ref_h)
    per_ref = min(c.floor_per_h / max(c.top, 1e-6) for c in inputs.candidates)
    boot = min(c.storage_per_h for c in inputs.candidates) * inputs.boot_h
    return work * per_ref + boot


def _beta(rng: random.Random, mean: float, strength: float) -> float:
    m = min(0.98, max(0.02, mean))
    n = max(strength, 1.0)
    return rng.betavariate(m * n, (1 - m) * n)


def _poisson(rng: random.Random, lam: float) -> int:
    if lam <= 0:
        return 0
    n, t = 0, rng.expovariate(1.0)
    while t < lam:
        n += 1
        t += rng.expovariate(1.0)
    return n


def play(inputs: PlanInputs, rng: random.Random) -> tuple[float, float, int]:
    """One draw: (USD, market hours until the last job ends, creates)."""
    cands = inputs.candidates
    top = cands[: max(1, inputs.first)]
    mean_p = sum(c.p for c in top) / len(top)
    scale = _beta(rng, mean_p, inputs.odds_runs) / max(mean_p, 1e-6)  # this market's odds
    outbids = rng.gammavariate(2.0, 0.5)  # this market's outbid rate against the expected
    # the share of a boot, and of a dud's life, its GPU bills: all of it where the GPU bills
    # from the create; else only its running part (a preflight; a dud that runs and fails it,
    # not one that dies pulling), a share nothing in the ledger says
    boot_gpu = 1.0 if inputs.gpu_from_create else rng.uniform(0.0, 0.5)
    dud_gpu = 1.0 if inputs.gpu_from_create else rng.uniform(0.0, 0.25)
    # what a winning bid pays: its own bid, or down to what it had to beat (no source says)
    clearing = rng.random()
    usd, creates, nxt = 0.0, 0, 0
    proven: list[tuple[float, Candidate, float]] = []  # (ready at, offer, speed)
    tries: list[tuple[float, int]] = [(0.0, i) for i in range(max(1, inputs.first))]
    heapq.heapify(tries)
    while tries and creates < inputs.max_creates:
        t, slot = heapq.heappop(tries)
        if len(proven) >= inputs.hosts and t > 0:
            continue  # proven enough: the rules stop replacing
        c = cands[nxt % len(cands)]
        nxt += 1
        creates += 1
        gpu = max(0.0, c.usd_per_h - c.storage_per_h)
        if rng.random() < min(0.99, max(0.01, c.p * scale)):
            usd += (c.storage_per_h + gpu * boot_gpu) * inputs.boot_h
            speed = min(c.top, c.rate * math.exp(rng.gauss(0.0, 0.15)))
            if c.beat_per_h is not None:
                c = replace(c, usd_per_h=c.usd_per_h - clearing * (c.usd_per_h - c.beat_per_h))
            proven.append((t + inputs.boot_h, c, speed))
        else:
            life = inputs.dud_h * rng.expovariate(1.0)
            usd += (c.storage_per_h + gpu * dud_gpu) * life
            heapq.heappush(tries, (t + life, slot))
    if not proven:
        return usd, float("inf"), creates
    free = [(ready, i) for i, (ready, _, _) in enumerate(proven)]
    heapq.heapify(free)
    end = max(ready for ready, _, _ in proven)
    for size in sorted(inputs.jobs_ref_h, reverse=True):
        t, i = heapq.heappop(free)
        _, c, speed = proven[i]
        hours = size / max(speed, 1e-6)
        if c.outbid_per_h > 0:
            n = _poisson(rng, c.outbid_per_h * outbids * hours)
            hours += n * (c.ckpt_h / 2 + RESUME_H)
            usd += n * c.outbid_usd
        usd += c.usd_per_h * hours
        heapq.heappush(free, (t + hours, i))
        end = max(end, t + hours)
    usd += sum(c.usd_per_h * inputs.tail_h for _, c, _ in proven)
    return usd, end, creates


def _pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    if math.isinf(s[hi]):  # draws that never proved a host: no interpolation into infinity
        return s[hi] if k > lo else s[lo]
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def plan(inputs: PlanInputs, rng: random.Random, draws: int = DRAWS) -> Plan | None:
    """The range over `draws` plays (None: no offer to rent)."""
    if not inputs.candidates:
        return None
    runs = [play(inputs, rng) for _ in range(draws)]
    costs = [u for u, _, _ in runs]
    hours = [h for _, h, _ in runs]
    creates = [float(n) for _, _, n in runs]

    def three(xs: Sequence[float]) -> tuple[float, float, float]:
        return (_pct(xs, 0.1), _pct(xs, 0.5), _pct(xs, 0.9))

    return Plan(three(costs), three(hours), floor_usd(inputs), three(creates), draws)
