"""The rules' decisions under the campaign's blame, part of `decide()`: an abandon whose host is
spared earns no quarantine; under a campaign fault no creates, the unproven attempts given up and
the campaign ended once nothing runs; while a pull is in doubt, creates wait."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..decisions import Abandon, AttemptView, Create, Decision, Finish
from ..lifecycle import IN_FLIGHT
from .fault import BlameView, Failure, Stage, blame


def spares_host(a: AttemptView, d: Abandon, view: BlameView) -> bool:
    if a.instance_id in view.spared:
        return True
    if d.failure_class != "fatal":
        return False
    failure = Failure(a.machine_id or -a.instance_id, view.image, Stage.PULL, a.status_msg or "")
    return not blame(failure, view.evidence).quarantine


def under_blame(
    decisions: Sequence[Decision],
    attempts: Sequence[AttemptView],
    jobs_running: int,
    view: BlameView | None,
) -> list[Decision]:
    if view is None:
        return list(decisions)
    by_id = {a.instance_id: a for a in attempts}
    out: list[Decision] = []
    for d in decisions:
        a = by_id.get(d.instance_id) if isinstance(d, Abandon) else None
        if isinstance(d, Abandon) and a is not None and spares_host(a, d, view):
            d = replace(d, quarantine=None)
        out.append(d)
    if view.fault is None:
        leaving = {d.instance_id for d in out if isinstance(d, Abandon)}
        deciding = any(a.phase in IN_FLIGHT and a.instance_id not in leaving for a in attempts)
        if view.pull_in_doubt and deciding:
            return [d for d in out if not isinstance(d, Create)]
        return out
    out = [d for d in out if not isinstance(d, Create)]
    acted = {getattr(d, "instance_id", None) for d in out}
    for a in attempts:
        if a.phase in IN_FLIGHT and not a.passed_preflight and a.instance_id not in acted:
            out.append(Abandon.of(a, "rule:blame", f"campaign fault: {view.fault}", "cancelled"))
    busy = jobs_running > 0 or any(a.phase in IN_FLIGHT and a.passed_preflight for a in attempts)
    if not busy and not any(isinstance(d, Finish) for d in out):
        out.append(Finish(False, "rule:blame", f"campaign fault: {view.fault}"))
    return out
