"""The fleet beside a proven cheap host: how few hosts a campaign holds when machines that
delivered work for it before do that work for well under what a stranger would. Pure.

The floor puts the work on the cheapest one or two machines per delivered unit; a fleet of three
holds dearer strangers beside its cheapest proven one. Where the proven hosts alone finish the
work left within the policy's horizon (`proven_fleet_h`, never past the deadline), the fleet is
cut to them, and no stranger is rented to stand beside them."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..decisions import AttemptView
from ..delivery import WorkOutlook
from ..lifecycle import ALIVE
from ..models import Offer
from .choice import History, work_scores

# a stranger is "well above" a proven host when its expected USD per delivered reference hour is
# at least this many times the proven host's: below it, the stranger's speed is worth its price
STRANGER_GAP = 1.25


@dataclass(frozen=True)
class ProvenHost:
    machine_id: int
    usd_per_ref_h: float  # what its work costs, per delivered reference GPU-hour
    rate: float  # reference GPU-hours it delivers an hour, as measured


def fleet_beside_proven(
    fleet: int,
    proven: Sequence[ProvenHost],
    stranger_usd_per_ref_h: float,
    work_left_ref_h: float,
    hours: float,
) -> tuple[int, str]:
    """The fleet to hold, and why (empty: the campaign's own): the fewest proven hosts, fastest
    first, each well cheaper than the best stranger, that deliver the work left within `hours`."""
    cheap = sorted(
        (h for h in proven if h.usd_per_ref_h * STRANGER_GAP <= stranger_usd_per_ref_h),
        key=lambda h: (-h.rate, h.usd_per_ref_h, h.machine_id),
    )
    if not cheap or hours <= 0 or work_left_ref_h <= 0:
        return fleet, ""
    done, n = 0.0, 0
    while n < min(fleet, len(cheap)) and done < work_left_ref_h:
        done += cheap[n].rate * hours
        n += 1
    if done < work_left_ref_h or n >= fleet:
        return fleet, ""
    usd = max(h.usd_per_ref_h for h in cheap[:n])
    stranger = "none" if math.isinf(stranger_usd_per_ref_h) else f"${stranger_usd_per_ref_h:.3f}"
    return n, (
        f"fleet {fleet} -> {n}: {n} proven host(s) at up to ${usd:.3f} per ref-h finish the "
        f"{work_left_ref_h:.2f} ref-h left within {hours:.1f} h (best stranger {stranger})"
    )


def proven_hosts(
    attempts: Sequence[AttemptView], fit: Sequence[Offer], history: History, work: WorkOutlook
) -> tuple[list[ProvenHost], float]:
    """The proven machines the campaign holds or could rent now (`fit`: the offers it could rent,
    at the price their creates pay), and the best stranger's USD per delivered reference hour
    (inf: none). Proven is delivered: a finished job on its record, and
    more rentals' worth delivered than failed; verified alone is not."""
    memory = work.memory
    if memory is None:
        return [], math.inf

    def proven(machine_id: int | None) -> bool:
        rec = memory.machines.get(machine_id) if machine_id is not None else None
        return rec is not None and rec.jobs_finished > 0 and rec.delivered > rec.failed

    out: dict[int, ProvenHost] = {}
    for a in attempts:
        if a.machine_id is not None and a.phase in ALIVE and proven(a.machine_id):
            rate = max(work.rate(a.offer_gpu, a.machine_id), 1e-6)
            out[a.machine_id] = ProvenHost(a.machine_id, a.dph / rate, rate)
    stranger = math.inf
    for usd, o, _ in work_scores(fit, history, work):
        if proven(o.machine_id):
            if o.machine_id not in out:
                out[o.machine_id] = ProvenHost(
                    o.machine_id, usd, work.rate(o.gpu_name, o.machine_id)
                )
        else:
            stranger = min(stranger, usd)
    return list(out.values()), stranger
