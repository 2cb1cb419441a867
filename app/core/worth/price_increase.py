"""A host's price increase on a held rental: accept it or reject it and move the work. Pure.

Vast's pending flow (vast-cli PR #401): the contract keeps its price until its end date, then
runs on at the new price if accepted, or ends if rejected. Accepted while the rental at its new
price per delivered reference GPU-hour beats the best fit offer now plus the work a move redoes;
a rejected rental is stopped, never destroyed. With nothing to compare against, accepted."""

from __future__ import annotations

from dataclasses import dataclass

from .swap import keep_usd_per_ref_h

ACCEPT_RULE = "rule:price_accept"
REJECT_RULE = "rule:price_reject"


@dataclass(frozen=True)
class PriceIncrease:
    """One pending increase in rentwatch's words: $/h for the rental's GPUs and storage $/GB-hour
    (None: unchanged), when it applies and the new end date."""

    pending_id: int
    instance_id: int
    old_gpu_dph: float | None
    new_gpu_dph: float | None
    old_storage_gb_h: float | None
    new_storage_gb_h: float | None
    takes_effect_at: float | None
    new_end: float | None
    others_changed: tuple[str, ...] = ()  # bandwidth or the platform fee changed too


@dataclass(frozen=True)
class IncreaseCase:
    """What the rule weighs for one increase on one rental."""

    increase: PriceIncrease
    old_dph: float  # the rental's $/h now, GPU and storage
    new_dph: float  # and once the increase applies
    rate: float | None  # reference GPU-hours an hour it delivers (None: not known)
    work_ref_h: float  # the work a host still has to take on (0: no sized work ahead)
    fresh: tuple[float, str] | None  # a fresh create's USD per ref-h (boot, duds in), and why
    redo_ref_h: float  # work a move redoes: done since its job's last checkpoint came off
    value_of_time: float


@dataclass(frozen=True)
class PriceVerdict:
    """Accept or reject one increase; `keep` and `move` are the two USD per ref-h compared."""

    increase: PriceIncrease
    accept: bool
    rule: str
    reason: str
    keep: float | None = None
    move: float | None = None


def decide_increase(case: IncreaseCase) -> PriceVerdict:
    inc, old, new = case.increase, case.old_dph, case.new_dph
    said = f"${old:.4f}/h -> ${new:.4f}/h"
    if new <= old:
        return PriceVerdict(inc, True, ACCEPT_RULE, f"{said}: no dearer than now")
    if case.fresh is None or case.rate is None or case.rate <= 0 or case.work_ref_h <= 0:
        why = "no sized work ahead to price it by" if case.work_ref_h <= 0 else "no fit offer"
        return PriceVerdict(
            inc, True, ACCEPT_RULE, f"{said}: kept, nothing to weigh it against ({why})"
        )
    keep = keep_usd_per_ref_h(new, case.rate, case.work_ref_h, case.value_of_time)
    fresh, fresh_why = case.fresh
    redo = max(0.0, case.redo_ref_h)
    move = fresh * (case.work_ref_h + redo) / case.work_ref_h
    terms = (
        f"{said} at {case.rate:.2f} ref-h/h is ${keep:.4f} per ref-h; a move is ${move:.4f} "
        f"(a fresh create's ${fresh:.4f}: {fresh_why}; {redo:.2f} ref-h since its last "
        "checkpoint done again)"
    )
    if keep <= move:
        return PriceVerdict(inc, True, ACCEPT_RULE, f"still the better buy: {terms}", keep, move)
    return PriceVerdict(
        inc, False, REJECT_RULE, f"dearer than a move: {terms}; its work moves", keep, move
    )
