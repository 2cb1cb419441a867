"""Which offer to rent, and what to quarantine: pure, so `decide()` returns complete decisions. A
market answer is evidence, not truth: a price must be finite and not negative."""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ..delivery import WorkOutlook
from ..hedge import HedgeInputs, mean_odds, spare_attempts
from ..models import Offer
from ..policy import Policy
from ..preflight.gpu_specs import driver_too_old, offer_contradicts_itself
from .reputation import (
    DEFAULT_DUD_USD,
    PRIOR_STRENGTH,
    ROUND_H,
    market_odds,
    offer_odds,
    rank_offers,
)
from .track_record import Memory
from .work_cost import deliver_odds, host_cost

# machine id -> (delivered, duds, mean dud USD): rentals' worth, faded (track_record.py)
History = dict[int, tuple[float, float, float]]


@dataclass(frozen=True)
class OfferTerms:
    """What the campaign asks of an offer."""

    max_dph: float
    image_cuda: float


@dataclass(frozen=True)
class Exclusions:
    """Machines not to rent now."""

    quarantined: frozenset[int] = frozenset()
    held: frozenset[int] = frozenset()
    recent_failures: frozenset[int] = frozenset()
    # quarantined by a teammate's controller (the team store): skipped, never quarantined here
    # on their word, so this ledger's own quarantine stays its own evidence
    team: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Quarantine:
    """A machine not to be rented again: within the campaign, or ledger-wide until `until`."""

    machine_id: int
    reason: str
    failure_class: str
    scope: str  # "campaign" | "ledger"
    until: float | None = None  # market time it lapses; None: never (or the campaign's end)


def price_sane(o: Offer) -> bool:
    """Every price the offer carries is a finite number, not negative: GPU time, storage and
    bandwidth (a negative one would pay us, and defeat the budget's arithmetic)."""
    prices = (o.dph_total, o.gpu_dph, o.storage_cost, o.inet_up_cost, o.inet_down_cost)
    return all(math.isfinite(p) and p >= 0 for p in prices)


def unfit_reason(o: Offer, terms: OfferTerms, policy: Policy, skip: Exclusions) -> str | None:
    """Why the campaign would not rent `o` now (None: it fits). The first reason that holds,
    in the order the fit is checked; `rentwatch offers` shows it beside the offer."""
    if not price_sane(o):
        return "a price that is not a finite, non-negative number"
    if o.dph_total > terms.max_dph:
        return f"${o.dph_total:.3f}/h is over the campaign's max_dph ${terms.max_dph:g}/h"
    if o.cuda_max_good is not None and o.cuda_max_good < terms.image_cuda:
        return f"CUDA {o.cuda_max_good:g} is older than the image's {terms.image_cuda:g}"
    if o.machine_id in skip.quarantined:
        return f"machine {o.machine_id} is quarantined"
    if o.machine_id in skip.team:
        return f"machine {o.machine_id} is quarantined by a teammate"
    if o.machine_id in skip.held:
        return f"machine {o.machine_id} is held already"
    if o.machine_id in skip.recent_failures:
        return f"machine {o.machine_id} failed just now"
    if policy.offer_sanity:
        if offer_contradicts_itself(o.gpu_name, o.dlperf):
            return f"its own benchmark (dlperf {o.dlperf}) contradicts a {o.gpu_name}"
        if driver_too_old(o.driver_version, terms.image_cuda):
            return f"driver {o.driver_version} cannot run CUDA {terms.image_cuda:g}"
    return None


def fit_offers(
    offers: Sequence[Offer], terms: OfferTerms, policy: Policy, skip: Exclusions
) -> list[Offer]:
    return [o for o in offers if unfit_reason(o, terms, policy, skip) is None]


def fit_of(
    offers: Sequence[Offer] | None, terms: OfferTerms | None, policy: Policy, skip: Exclusions
) -> list[Offer] | None:
    """`fit_offers`, or None where the market was not searched this poll."""
    return None if offers is None or terms is None else fit_offers(offers, terms, policy, skip)


def work_odds(
    history: History,
    work: WorkOutlook,
    gpu: str,
    machine_id: int | None,
    dph: float | None = None,
    host: int | None = None,
    reliability: float | None = None,
) -> float:
    """p(deliver) of a machine of a GPU model at `dph` on `host`, listing `reliability`: with our
    faded record, the machine's over its host's, band's, model's and the market's (the listed
    score as far as our record has seen it predict delivery); else the machine's over its
    model's, over the pool."""
    if work.memory is not None:
        return work.memory.odds(gpu, dph, machine_id, host, work.prior_runs, reliability)
    record = history.get(machine_id) if machine_id is not None else None
    pool = market_odds(history, work.prior_runs)
    return deliver_odds(record, work.models.get(gpu), pool, work.prior_runs)


def rank_by_work(
    offers: Sequence[Offer], history: History, work: WorkOutlook, value_of_time: float = 0.0
) -> list[tuple[Offer, str]]:
    """Offers best first by expected USD per delivered reference GPU-hour (`work_scores`)."""
    return [(o, why) for _, o, why in work_scores(offers, history, work, value_of_time)]


def work_scores(
    offers: Sequence[Offer],
    history: History,
    work: WorkOutlook,
    value_of_time: float = 0.0,
    covered: bool = False,
) -> list[tuple[float, Offer, str]]:
    """Offers best first, each with its expected USD per delivered reference GPU-hour (`work_cost`)
    and the sentence the ledger records: price over the work, the boot hours, the duds expected
    before one delivers, and the wait at the operator's value of time (`covered`: a proven host
    works on while this one boots, so its boot and duds hold nothing back)."""
    scored = []
    for o in offers:
        record = history.get(o.machine_id)
        p = work_odds(
            history, work, o.gpu_name, o.machine_id, o.dph_total, o.host_id, o.reliability
        )
        rate = max(work.rate(o.gpu_name, o.machine_id), 1e-6)
        cost = host_cost(o.dph_total, rate, p, work.dud_h, work.job_ref_h, work.boot_h)
        per_ref_h = cost.per_ref_h(value_of_time, covered)
        runs = round(sum(record[:2]), 1) if record else 0  # rentals' worth, faded
        why = (
            f"m:{o.machine_id} ${o.dph_total:.3f}/h, {rate:.2f} ref-h/h, p(deliver)={p:.2f} "
            f"from {runs:g} run{'s' if runs != 1 else ''}: ${per_ref_h:.3f} per ref-h"
        )
        scored.append((per_ref_h, o.id, o, why))
    scored.sort(key=lambda t: (t[0], t[1]))
    return [(usd, o, why) for usd, _, o, why in scored]


def choose_offers(
    fit: Sequence[Offer],
    n: int,
    history: History,
    by: str,
    value_of_time: float = 0.0,
    work: WorkOutlook | None = None,
    memory: Memory | None = None,
    strength: float = PRIOR_STRENGTH,
) -> list[tuple[Offer, str]]:
    """The best `n` offers, one per machine, each with the sentence the ledger records: by cost per
    delivered unit of work with sized jobs, else per delivered hour."""
    out: list[tuple[Offer, str]] = []
    taken: set[int] = set()
    ranked = (
        rank_by_work(fit, history, work, value_of_time)
        if work is not None and by == "expected_cost"
        else rank_offers(fit, history, by, value_of_time, memory, strength)
    )
    for o, why in ranked:
        if len(out) >= n:
            break
        if o.machine_id in taken:
            continue
        taken.add(o.machine_id)
        out.append((o, why))
    return out


DEADLINE_VALUE_USD_PER_H = 5.0  # a campaign with a deadline: waiting is worth at least this


def hedge_for(
    fit: Sequence[Offer],
    need: int,
    history: History,
    policy: Policy,
    fleet_size: int,
    spare_has_work: bool,
    deadline_set: bool = False,
    work: WorkOutlook | None = None,
) -> tuple[int, str]:
    """Spare attempts to keep in flight now (see `hedge`), from the odds of the next offers and the
    operator's value of time. With sized work a spare that takes a job costs the premium its work
    pays (`spare_work_premium`), not nothing."""
    value = policy.value_of_time_usd_per_h
    if deadline_set and value > 0:
        value = max(value, DEADLINE_VALUE_USD_PER_H)
    if value <= 0 or policy.max_spare_attempts <= 0 or not fit:
        return 0, ""
    pool = market_odds(history)
    best = [
        o
        for o, _ in choose_offers(
            fit, need + policy.max_spare_attempts, history, policy.rank, value, work
        )
    ]
    odds = [offer_odds(history.get(o.machine_id), o.reliability, pool) for o in best]
    duds = [u for _, bad, u in history.values() if bad and u > 0]
    dph = mean_odds([o.dph_total for o in best], 0.0)
    premium = spare_work_premium(best, need, history, work) if spare_has_work else 0.0
    spares, why = spare_attempts(
        HedgeInputs(
            need=need,
            p_deliver=mean_odds(odds, 0.5),
            value_of_time_usd_per_h=value,
            dud_usd=mean_odds(duds, DEFAULT_DUD_USD),
            # a delivering spare with a job waiting takes it (the work is paid for either way:
            # only its boot is extra); otherwise it idles until the idle rule stops it
            # and, where the work is sized, what its share of the work costs more on a spare
            # (an offer further down the ranking) than on the hosts it would have waited for
            surplus_usd=dph * (ROUND_H + (0 if spare_has_work else policy.idle_grace_s / 3600))
            + premium,
            fleet=fleet_size,
            max_spares=min(policy.max_spare_attempts, max(0, len(fit) - need)),
        )
    )
    return spares, why


def spare_work_premium(
    ranked: Sequence[Offer], need: int, history: History, work: WorkOutlook | None
) -> float:
    """What a spare's share of the work is expected to cost beyond the same work on the hosts it
    hedges for: the spares' mean USD per reference GPU-hour less the first `need`'s, times the
    work one host takes. Without it the hedge reads a delivering spare as free."""
    if work is None or need <= 0 or len(ranked) <= need:
        return 0.0
    by_offer = {o.id: usd for usd, o, _ in work_scores(ranked, history, work, 0.0)}
    first = [by_offer[o.id] for o in ranked[:need]]
    spares = [by_offer[o.id] for o in ranked[need:]]
    return max(0.0, mean_odds(spares, 0.0) - mean_odds(first, 0.0)) * work.job_ref_h


def quarantine_for(
    policy: Policy,
    machine_id: int | None,
    failure_class: str | None,
    reason: str,
    now: float,
    already: Collection[int] = (),
) -> Quarantine | None:
    """The quarantine a failure earns under `policy` (None: none). A cancelled attempt says
    nothing about its host; a machine already quarantined is not quarantined twice."""
    if (
        not policy.quarantine
        or machine_id is None
        or failure_class is None
        or failure_class == "cancelled"
        or machine_id in already
    ):
        return None
    until = (
        now + policy.quarantine_hours * 3600
        if policy.quarantine_persistent and policy.quarantine_hours
        else None
    )
    scope = "ledger" if policy.quarantine_persistent else "campaign"
    return Quarantine(machine_id, reason, failure_class, scope, until)


def at_risk(dph: float, created_at: float, boot_deadline_s: float, now: float) -> float:
    """What an attempt that has not proven itself may still bill before the boot rules give up
    on it: its hourly price over what is left of the boot deadline."""
    left = max(0.0, boot_deadline_s - max(0.0, now - created_at))
    return max(0.0, dph) * left / 3600


def within_budget(
    chosen: Sequence[tuple[Offer, str]], committed: float, budget: float, policy: Policy, now: float
) -> list[tuple[Offer | None, str]]:
    """The creates the budget can carry: `committed` (spent, plus what every unproven attempt
    in flight may still bill) and what each new one may bill stay within the budget."""
    out: list[tuple[Offer | None, str]] = []
    for offer, why in chosen:
        cost = at_risk(offer.dph_total, now, policy.boot_deadline_s, now)
        if committed + cost > budget:
            break
        committed += cost
        out.append((offer, why))
    return out
