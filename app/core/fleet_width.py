"""How many hosts sized work is worth: the campaign's fleet is the most held at once, and one
more host is rented only while the time it saves is worth what it costs. Pure.

With sized jobs the hosts differ tenfold in speed (an L40S does 1.5 reference GPU-hours an
hour, an RTX 3080 0.3), and a free host takes the next job whatever its speed: a slow third
host handed a big job can finish after the two fast ones would have done all the work, and
each host rented also bills its boot, its preflight and the duds on the way to it. On families
7070 and 2468 (docs/benchmarks.md) the six jobs of `bench/bid_campaign.toml` cost 11% less,
and ended no later, with a fleet of 2 as with 3.

So before each create the queue is played out twice, without the next host and with it: each
job, biggest first, goes to the host that is free first (the dispatch rule's order), at the
host's expected speed. The host is worth renting when the value of the time it takes off the
end (the operator's value of time) is more than what it adds to the bill: its own boot and
expected duds, and the work it takes over at its price instead of the others'.

Policy `fleet_by_worth`, off in every shipped policy: on fresh families 5309 and 8642 it saved
1% and the work ended later. Its play-out has no outbids in it, so on the interruptible tier it
counts on held bid hosts that are then paused.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .lifecycle import Phase
from .offer_choice import DEADLINE_VALUE_USD_PER_H, choose_offers, work_odds

if TYPE_CHECKING:
    from .decisions import AttemptView, FleetSnapshot
    from .delivery import WorkOutlook
    from .models import Offer
    from .policy import Policy

IN_FLIGHT = (Phase.REQUESTED, Phase.BOOTING, Phase.RUNNING, Phase.VERIFYING)


@dataclass(frozen=True)
class Host:
    rate: float  # reference GPU-hours it delivers an hour
    dph: float  # what it bills an hour while it works
    free_in_h: float = 0.0  # hours until it can take the next job (its boot, or its job)


def play_out(hosts: Sequence[Host], jobs_ref_h: Sequence[float]) -> tuple[float, float]:
    """(hours until the last job ends, USD the jobs bill): each job, biggest first, on the host
    free first (the faster among those free together)."""
    if not jobs_ref_h:
        return max((h.free_in_h for h in hosts), default=0.0), 0.0
    if not hosts:
        return float("inf"), 0.0
    free = [h.free_in_h for h in hosts]
    end = max(free)
    usd = 0.0
    for size in sorted(jobs_ref_h, reverse=True):
        i = min(range(len(hosts)), key=lambda k: (free[k], -hosts[k].rate))
        h = hosts[i]
        hours = size / max(h.rate, 1e-6)
        free[i] += hours
        usd += hours * max(0.0, h.dph)
        end = max(end, free[i])
    return end, usd


def worth_another(
    held: Sequence[Host],
    candidate: Host,
    overhead_usd: float,
    jobs_ref_h: Sequence[float],
    value_of_time: float,
) -> tuple[bool, str]:
    """Whether renting `candidate` (ready in `candidate.free_in_h`, billing `overhead_usd` before
    it works: its boot and its expected duds) pays for the time it takes off the work's end."""
    if not held:
        return True, "the first host"
    if not jobs_ref_h:
        return False, "no job waits for another host"
    end, usd = play_out(held, jobs_ref_h)
    end_with, usd_with = play_out([*held, candidate], jobs_ref_h)
    saved_h = end - end_with
    extra = usd_with - usd + overhead_usd
    worth = value_of_time * saved_h > extra
    return worth, (
        f"{len(held) + 1} hosts end the work {saved_h * 60:.0f} min sooner than {len(held)} "
        f"(${value_of_time * saved_h:.3f} at ${value_of_time:g}/h) for ${extra:.3f} more"
    )


def narrowed(
    fleet: FleetSnapshot,
    fit: Sequence[Offer] | None,
    policy: Policy,
    target: int,
    gone: Collection[int],
    now: float,
) -> tuple[int, str]:
    """The hosts to hold for the work: `target` (the fleet, or what the work needs), or fewer
    where the next best offers are not worth renting (`worth_another`), never fewer than are
    held or booting. Only under a policy that asks for it (`fleet_by_worth`), for sized jobs
    with the offers at hand; `gone`: attempts the rules give up this poll."""
    work = fleet.work
    value = policy.value_of_time_usd_per_h
    if fleet.deadline is not None and value > 0:
        value = max(value, DEADLINE_VALUE_USD_PER_H)
    if not policy.fleet_by_worth or work is None or work.queue_ref_h is None or not fit:
        return target, ""
    odds = work_odds(fleet.history, work)
    held = [
        _held(a, work, now, odds(a.offer_gpu, a.machine_id))
        for a in fleet.attempts
        if a.instance_id not in gone and (a.phase in IN_FLIGHT or a.phase == Phase.VERIFIED)
    ]
    if len(held) >= target:
        return target, ""
    offers = choose_offers(fit, target - len(held), fleet.history, policy.rank, value, work)
    for offer, _ in offers:
        p = max(odds(offer.gpu_name, offer.machine_id, offer.dph_total, offer.host_id), 1e-3)
        ready_h = work.boot_h + (1 - p) / p * work.dud_h
        host = Host(work.rate(offer.gpu_name, offer.machine_id), offer.dph_total, ready_h)
        worth, why = worth_another(held, host, offer.dph_total * ready_h, work.queue_ref_h, value)
        if not worth:
            return len(held), why
        held.append(host)
    return target, ""


def _held(a: AttemptView, work: WorkOutlook, now: float, p: float) -> Host:
    """A host we hold as the play-out sees it: booting (ready after what is left of its boot,
    and the duds its odds expect), busy (free when its job's work is done) or free now."""
    rate = work.rate(a.offer_gpu, a.machine_id)
    if a.phase in IN_FLIGHT:
        left_h = max(0.0, work.boot_h - (now - a.created_at) / 3600)
        p = max(p, 1e-3)
        return Host(rate, a.dph, left_h + (1 - p) / p * work.dud_h)
    size, started = work.running.get(a.instance_id, (0.0, now))
    done = max(0.0, now - started) / 3600 * rate
    return Host(rate, a.dph, max(0.0, size - done) / max(rate, 1e-6))
