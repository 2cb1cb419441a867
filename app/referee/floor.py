"""The honest floor of a referee run: the least any policy could have paid for the work the run
delivered, from the market's truth, never from what a policy could know.

Every hour of work paid some delivering machine's price while it ran (a bid at least the need
then), so the floor fills the work into the cheapest machine-hours of the run's window first,
fractionally, plus one least-cost boot; no fleet, since a policy may work on fewer hosts
(docs/referee.md, "The floor"). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.bidding.tier import eligible
from ..core.billing import storage_per_hour
from ..core.campaign import Campaign
from ..core.preflight.gpu_specs import expected_tflops
from ..engine.jobs.runner import job_dir
from ..sim import bids
from ..sim.machines import Machine
from ..sim.rental import least_boot_s
from ..sim.scenario import DELIVERING, Scenario

EPS = 1e-6


@dataclass(frozen=True)
class Rentable:
    """One delivering machine the campaign may rent, as the floor sees it."""

    machine_id: int
    dph: float  # on-demand $/h
    storage_dph: float  # $/h of the campaign's disk on it
    tflops: float  # its real speed, before any throttling
    boot_s: float  # the least market seconds from a create to running
    window_s: float  # the market seconds of the run's window: it runs no longer than that
    # the tier: (seconds, the least $/h a bid pays then), piece by piece over the window,
    # the on-demand price where an on-demand rival holds it; () where no work may bid
    bid_pieces: tuple[tuple[float, float], ...] = ()

    def low_dph(self) -> float:
        """The least $/h it bills its GPU at, at any moment of the window."""
        return min([self.dph, *(p for _, p in self.bid_pieces)])


@dataclass(frozen=True)
class Work:
    """Work a run delivered: reference GPU-hours of sized jobs (`ref_tflops` the reference
    GPU's speed), or market hours of jobs that take as long on any GPU (`ref_tflops` None)."""

    hours: float
    ref_tflops: float | None = None
    bid: bool = False  # may run on the interruptible tier


@dataclass(frozen=True)
class Floor:
    usd: float
    work_usd: float  # the work's machine-hours, GPU and storage
    boot_usd: float  # one boot (and preflight) on the machine whose boot costs least
    bid_share: float  # the share of the work's units the fill put on the tier

    def json(self) -> dict[str, Any]:
        return {
            "work_usd": round(self.work_usd, 6),
            "boot_usd": round(self.boot_usd, 6),
            "bid_share": round(self.bid_share, 3),
        }


def _offers(m: Rentable, w: Work) -> list[tuple[float, float, bool]]:
    """(units of `w` it can deliver, $ per unit, on the tier) on machine `m`, piece by piece."""
    hours_per_unit = w.ref_tflops / m.tflops if w.ref_tflops is not None else 1.0
    if w.bid and m.bid_pieces:
        spans = [(s / 3600, min(m.dph, p), p < m.dph) for s, p in m.bid_pieces]
    else:
        spans = [(max(0.0, m.window_s - m.boot_s) / 3600, m.dph, False)]
    return [
        (h / hours_per_unit, (price + m.storage_dph) * hours_per_unit, tier)
        for h, price, tier in spans
        if h > 0
    ]


def _fill(machines: Sequence[Rentable], w: Work) -> tuple[float, float]:
    """(USD, units on the tier) of `w`'s units bought cheapest first from every machine's
    pieces; units no machine could take within the window are left unpriced (a floor)."""
    pieces = sorted((p for m in machines for p in _offers(m, w)), key=lambda p: p[1])
    need, usd, tier = w.hours, 0.0, 0.0
    for units, per_unit, on_tier in pieces:
        if need <= EPS:
            break
        take = min(units, need)
        usd += take * per_unit
        tier += take if on_tier else 0.0
        need -= take
    return usd, tier


def floor(machines: Sequence[Rentable], work: Iterable[Work], gpu_billing: str) -> Floor:
    """The least a policy could pay for `work` on these machines: each kind of work filled cheapest
    first, plus the cheapest boot. Nothing delivered: nothing owed."""
    work = list(work)
    usable = [m for m in machines if m.tflops > 0]
    if not work or not usable:
        return Floor(0.0, 0.0, 0.0, 0.0)
    kinds: dict[tuple[float | None, bool], float] = {}
    for w in work:  # work of unknown length (0 hours) still took a host
        if w.hours > 0:
            key = (w.ref_tflops, w.bid)
            kinds[key] = kinds.get(key, 0.0) + w.hours
    work_usd = units = tier = 0.0
    for (ref, bid), hours in kinds.items():
        usd, on_tier = _fill(usable, Work(hours, ref, bid))
        work_usd, units, tier = work_usd + usd, units + hours, tier + on_tier
    bids_any = any(bid for _, bid in kinds)

    def boot(m: Rentable) -> float:
        gpu = (m.low_dph() if bids_any else m.dph) if gpu_billing == "created" else 0.0
        return m.boot_s / 3600 * (gpu + m.storage_dph)

    boot_usd = min(boot(m) for m in usable)
    return Floor(work_usd + boot_usd, work_usd, boot_usd, tier / units if units else 0.0)


# -- reading it off a simulated market ------------------------------------------------------


def bid_pieces(
    scenario: Scenario, m: Machine, lo: float, hi: float
) -> tuple[tuple[float, float], ...]:
    """What a bid on `m` must reach, piece by piece over [lo, hi]: the sim's own `need`, or the
    on-demand price where an on-demand rival holds the machine."""
    seed, b = scenario.seed, scenario.bids
    points = [lo, *(t for t in bids.changes(seed, b, m, lo, hi) if t < hi), hi]
    out = []
    for a, z in zip(points, points[1:], strict=False):
        if z > a:
            need = bids.need(seed, b, m, a)
            out.append((z - a, m.gpu_dph if need is None else need))
    return tuple(out)


def rentables(
    machines: Iterable[Machine],
    scenario: Scenario,
    campaign: Campaign,
    lo: float,
    hi: float,
    tier: bool,
) -> list[Rentable]:
    """The delivering machines the campaign may rent (the engine's own fit) over [lo, hi], with
    their bid pieces under `tier`. Listings the default search leaves out count too: more
    machines only lower the floor."""
    out = []
    for m in machines:
        if m.behaviour not in DELIVERING or m.real_tflops <= 0:
            continue
        storage = storage_per_hour(campaign.disk_gb, m.storage_cost)
        if m.gpu_dph + storage > campaign.max_dph + EPS or m.cuda_max_good < campaign.image_cuda:
            continue
        out.append(
            Rentable(
                m.id,
                m.gpu_dph,
                storage,
                m.real_tflops,
                least_boot_s(m.knobs),
                hi - lo,
                bid_pieces(scenario, m, lo, hi) if tier else (),
            )
        )
    return out


def delivered(
    truth: Mapping[str, Any],
    good: set[int],
    start: float,
    finish: float,
    campaign: Campaign,
    unsized_done: int,
) -> list[Work]:
    """The work a run delivered on delivering machines (`good`) within [start, finish]: each sized
    job's size (less checkpoints made on a dud), and any of `unsized_done` jobs of unknown length."""
    jobs = {job_dir(j.name).rsplit("/", 1)[-1]: j for j in campaign.jobs}  # as the sim names them
    tier_ok = campaign.rental != "on-demand"
    finished: set[str] = set()
    did: dict[str, float] = {}
    size: dict[str, tuple[float, str]] = {}
    for row in truth.get("jobs") or ():
        if row.get("started_at", 0.0) < start - EPS or int(row["instance_id"]) not in good:
            continue
        name = str(row["job"])
        size[name] = (float(row["ref_hours"]), str(row["ref_gpu"]))
        did[name] = did.get(name, 0.0) + max(
            0.0, float(row["work_ref_h"]) - float(row.get("resumed_ref_h") or 0.0)
        )
        if row.get("done_at") is not None and row["done_at"] <= finish + EPS:
            finished.add(name)
    out = []
    for name in sorted(finished):
        ref_hours, ref_gpu = size[name]
        job = jobs.get(name)
        out.append(
            Work(
                min(ref_hours, did[name]),
                expected_tflops(ref_gpu),
                tier_ok and job is not None and eligible(job),
            )
        )
    if unsized_done:  # 0 hours: their length is unknown, but they still needed a host
        out.append(Work(0.0))
    return out
