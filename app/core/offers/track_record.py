"""What each rental delivered, and the record it earns its machine, host, GPU model and price band
(and how far the score each offer listed told delivery apart), with old evidence fading. Pure.

A finished rental is a delivery, one that lost a job counts against its machine by the share
lost, one proven and never given work half a delivery, a dud a failure; a proven rental that broke
(quarantined for its host's fault) lost at least one job's worth, and with none finished it is
priced as a dud. Evidence weighs `0.5 ** (age / half_life)`: hosts change drivers, disks and lines
(docs/campaigns.md, "Memory")."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from .listed_reliability import ListedFit, fit
from .work_cost import PRIOR_ODDS, shrunk

HALF_LIFE_H = 72.0  # market hours for a rental's evidence to weigh half (docs/campaigns.md)
VERIFIED_ONLY = 0.5  # a proven rental that never got work: half a delivery
BAND_RATIO = 1.25  # a price band spans this factor of $/h (bands are per GPU model)
MACHINE_STRENGTH = 2.0  # how many rentals' worth the level above counts for a machine or host


@dataclass(frozen=True)
class Rental:
    """One rental as the ledger remembers it; rentals given up for the campaign's fault or cancelled
    are not evidence and never reach here."""

    machine_id: int
    host_id: int | None
    gpu_name: str
    dph: float
    at: float  # market time of its last sign: its evidence is dated there
    verified: bool
    dud: bool
    usd: float = 0.0  # what it billed
    lifetime_min: float = 0.0
    jobs_finished: int = 0
    jobs_lost: int = 0  # jobs it held that went back to the queue for its host's fault
    work_ref_h: float = 0.0  # reference GPU-hours it delivered (sized jobs)
    outbids: int = 0
    throttled: bool = False
    listed_reliability: float | None = None  # the offer's `reliability` when we rented it
    # proven, then quarantined for its host's fault (its container exited under the work, its
    # SSH went silent): minutes from its create to that quarantine; None: it never broke
    broke_min: float | None = None


def weight(at: float, now: float, half_life_h: float = HALF_LIFE_H) -> float:
    """How much evidence dated `at` weighs at `now`: halved each half-life (evidence from the future
    weighs 1; a half-life of 0 or less keeps full weight)."""
    if half_life_h <= 0:
        return 1.0
    age_h = max(0.0, now - at) / 3600
    return math.pow(0.5, age_h / half_life_h)


def outcome(r: Rental) -> tuple[float, float]:
    """(delivered, failed) one rental is worth, before fading (see the module's docstring)."""
    if r.dud:
        return 0.0, 1.0
    if not r.verified:
        return 0.0, 0.0
    done, lost = max(0, r.jobs_finished), max(0, r.jobs_lost)
    if r.broke_min is not None:  # the fault that stopped it is a loss, with a job on it or not
        lost = max(lost, 1)
    if done + lost == 0:
        return VERIFIED_ONLY, 0.0
    return done / (done + lost), lost / (done + lost)


def wasted(r: Rental) -> tuple[float, float] | None:
    """(minutes, USD) a rental that never delivered billed before it was given up: a dud's life
    and bill, or a proven rental's up to the fault that broke it with no job finished, at its
    price (it billed its boot and preflight, more than most duds, which die while they pull; it
    stays stopped for the operator after, billing storage); None: it delivered, or is alive."""
    if r.dud:
        return r.lifetime_min, r.usd
    if r.verified and r.broke_min is not None and r.jobs_finished <= 0:
        return r.broke_min, max(0.0, r.dph) * r.broke_min / 60
    return None


class Record(NamedTuple):
    """A faded record: rentals' worth delivered and failed, what the failures billed and how
    long they lived, and what was delivered (jobs, reference GPU-hours) and lost."""

    delivered: float = 0.0
    failed: float = 0.0
    duds: float = 0.0  # rentals that never delivered (`wasted`)
    dud_usd: float = 0.0  # faded sum of what they billed
    dud_min: float = 0.0  # faded sum of their lifetimes
    jobs_finished: float = 0.0
    jobs_lost: float = 0.0
    work_ref_h: float = 0.0
    outbids: float = 0.0
    throttled: float = 0.0

    def add(self, r: Rental, w: float) -> Record:
        good, bad = outcome(r)
        # a failure the odds count is priced at what such failures billed, the ones that broke
        # after their preflight included: the ranking reads a dud's cost from these
        lost = wasted(r)
        dud, (minutes, usd) = (0.0, (0.0, 0.0)) if lost is None else (w, lost)
        return Record(
            self.delivered + w * good,
            self.failed + w * bad,
            self.duds + dud,
            self.dud_usd + dud * usd,
            self.dud_min + dud * minutes,
            self.jobs_finished + w * r.jobs_finished,
            self.jobs_lost + w * r.jobs_lost,
            self.work_ref_h + w * r.work_ref_h,
            self.outbids + w * r.outbids,
            self.throttled + (w if r.throttled else 0.0),
        )

    def minus(self, part: Record | None) -> Record:
        """This record without `part` (a level below it), so no rental counts twice."""
        if part is None:
            return self
        return Record(*(max(0.0, a - b) for a, b in zip(self, part, strict=True)))

    @property
    def runs(self) -> float:
        return self.delivered + self.failed

    @property
    def mean_dud_usd(self) -> float:
        return self.dud_usd / self.duds if self.duds > 0 else 0.0


def band(gpu_name: str, dph: float) -> tuple[str, int]:
    """The price band an offer falls in: its GPU model, and its $/h in steps of BAND_RATIO."""
    return gpu_name, math.floor(math.log(max(dph, 1e-4)) / math.log(BAND_RATIO))


@dataclass(frozen=True)
class Memory:
    """Every level's faded record: machine, host, GPU model, (model, price band) and the pool; and
    how far the listed reliability told our duds apart (`listed_reliability.py`)."""

    machines: Mapping[int, Record] = field(default_factory=dict)
    hosts: Mapping[int, Record] = field(default_factory=dict)
    models: Mapping[str, Record] = field(default_factory=dict)
    bands: Mapping[tuple[str, int], Record] = field(default_factory=dict)
    pool: Record = Record()
    listed: ListedFit = ListedFit()

    def pool_odds(self, strength: float) -> float | None:
        """Our share of rentals that delivered, shrunk towards PRIOR_ODDS; None before any ended."""
        if self.pool.runs <= 0:
            return None
        return shrunk(PRIOR_ODDS, self.pool.delivered, self.pool.failed, strength)

    def odds(
        self,
        gpu_name: str,
        dph: float | None,
        machine_id: int | None,
        host_id: int | None,
        strength: float,
        reliability: float | None = None,
    ) -> float:
        """p(deliver) of an offer: its machine's record over its host's, its price band's, its
        model's and the pool's; a host and a machine take MACHINE_STRENGTH of the level above.
        For a machine we never rented, the offer's listed `reliability` moves the odds before its
        host's record, as far as our rentals have seen the score predict delivery (`self.listed`).
        The host's other machines only ever lower the odds: their deliveries never lift a machine
        over what its own record, band and score give it."""
        pool = self.pool_odds(strength)
        p = PRIOR_ODDS if pool is None else pool
        machine = self.machines.get(machine_id) if machine_id is not None else None
        host = self.hosts.get(host_id) if host_id is not None else None
        in_band = self.bands.get(band(gpu_name, dph)) if dph is not None else None
        model = self.models.get(gpu_name)
        # each level without the level below it: no rental counts twice on the way down
        for rec, k in (
            (model.minus(in_band) if model else None, strength),
            (in_band.minus(machine) if in_band else None, strength),
        ):
            if rec is not None and rec.runs > 0:
                p = shrunk(p, rec.delivered, rec.failed, k)
        if machine is None:  # a machine we rented speaks for itself
            p = self.listed.adjust(p, reliability)
        others = host.minus(machine) if host else None
        if others is not None and others.runs > 0:
            # only down: a host's other machines failing may share a cause (its line, its
            # owner's care), but their delivering told nothing apart on the held-out markets
            p = min(p, shrunk(p, others.delivered, others.failed, MACHINE_STRENGTH))
        if machine is not None and machine.runs > 0:
            p = shrunk(p, machine.delivered, machine.failed, MACHINE_STRENGTH)
        return p

    def history(self) -> dict[int, tuple[float, float, float]]:
        """Machine id -> (delivered, failed, mean USD of a dud): the ranking's per-machine view."""
        return {m: (r.delivered, r.failed, r.mean_dud_usd) for m, r in self.machines.items()}

    def model_counts(self) -> dict[str, tuple[float, float]]:
        return {g: (r.delivered, r.failed) for g, r in self.models.items()}

    def dud_life(self) -> tuple[float, float]:
        """(minutes every dud lived, duds), faded: how long the rules take to catch one."""
        return self.pool.dud_min, self.pool.duds


def remember(rentals: Iterable[Rental], now: float, half_life_h: float = HALF_LIFE_H) -> Memory:
    """Every rental's evidence, faded to `now`, summed per machine, host, model and band."""
    machines: dict[int, Record] = {}
    hosts: dict[int, Record] = {}
    models: dict[str, Record] = {}
    bands: dict[tuple[str, int], Record] = {}
    pool = Record()
    scored: list[tuple[float, float, float]] = []
    for r in rentals:
        w = weight(r.at, now, half_life_h)
        if r.listed_reliability is not None:
            good, bad = outcome(r)
            scored.append((r.listed_reliability, w * good, w * bad))
        machines[r.machine_id] = machines.get(r.machine_id, Record()).add(r, w)
        if r.host_id is not None:
            hosts[r.host_id] = hosts.get(r.host_id, Record()).add(r, w)
        models[r.gpu_name] = models.get(r.gpu_name, Record()).add(r, w)
        key = band(r.gpu_name, r.dph)
        bands[key] = bands.get(key, Record()).add(r, w)
        pool = pool.add(r, w)
    return Memory(machines, hosts, models, bands, pool, fit(scored))
