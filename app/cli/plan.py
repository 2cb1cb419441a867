"""`rentwatch offers --plan` (and `rentwatch plan`): what the job set is expected to cost and how
long it takes, as a range, priced by `core/plan.py`; this module only prints."""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

from ..core.campaign import Campaign
from ..core.plan import Plan, PlanInputs, plan
from ..core.plan_inputs import Sized, plan_inputs
from ..core.policy import Policy
from ..core.text import clean

if TYPE_CHECKING:
    from ..engine.preview import Preview

PLAN_SEED = 0  # the draws are seeded: the same market and ledger give the same plan


def _hours(h: float | None) -> str:
    if h is None or h != h or h == float("inf"):
        return "never"
    return f"{h * 60:.0f} min" if h < 1 else f"{h:.1f} h"


def as_json(
    view: Preview,
    campaign: Campaign,
    policy: Policy,
    result: Plan | None,
    jobs: Sized | None,
    inputs: PlanInputs | None,
    first: list[dict[str, Any]],
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "campaign": clean(campaign.name),
        "policy": policy.name,
        "jobs": len(campaign.jobs),
        "jobs_left": len(view.jobs_left),
        "sized_jobs": 0 if jobs is None else len(jobs.ref_h),
        "unsized_jobs": [] if jobs is None else list(jobs.unsized),
        "work_ref_h": None if jobs is None else round(sum(jobs.ref_h), 4),
        "first": first,
    }
    if result is not None:
        out.update(result.json())
    if inputs is not None and inputs.candidates:
        c = inputs.candidates[0]
        out["odds"] = {  # what the range is drawn around: the policy's own figures
            "p_deliver_first": round(c.p, 4),
            "odds_runs": inputs.odds_runs,
            "dud_h": round(inputs.dud_h, 4),
            "boot_h": round(inputs.boot_h, 4),
            "outbids_per_h_first": round(c.outbid_per_h, 4),
            "hosts": inputs.hosts,
            "first_creates": inputs.first,
        }
    return out


def show(
    view: Preview, campaign: Campaign, policy: Policy, want_json: bool, first: list[dict[str, Any]]
) -> int:
    """Print the plan, `first` the offers rented first (`offers.offer_json`); 0 when one could
    be made (a sized job and an offer to rent)."""
    made = plan_inputs(
        view.snapshot, view.picks, campaign, policy, view.gpu_billing, view.jobs_left
    )
    inputs, jobs = made if made is not None else (None, None)
    result = plan(inputs, random.Random(PLAN_SEED)) if inputs is not None else None
    if want_json:
        print(json.dumps(as_json(view, campaign, policy, result, jobs, inputs, first), indent=1))
        return 0 if result is not None else 1
    name = clean(campaign.name, 80)
    if jobs is None or inputs is None:
        print(f"no plan for {name}: no job left to run has a size (ref_gpu and ref_hours)")
        return 1
    if result is None:
        print(f"no plan for {name}: no offer fits now (rentwatch offers --all says why)")
        return 1
    c, h = result.cost_usd, result.hours
    print(
        f"plan for {name} (policy {policy.name}): {len(jobs.ref_h)} sized jobs, "
        f"{sum(jobs.ref_h):.2f} reference GPU-hours, {inputs.hosts} hosts at once"
    )
    print(
        f"  cost   ${c[0]:.2f} - ${c[2]:.2f} (p10-p90 of {result.draws} draws; median ${c[1]:.2f})"
    )
    print(f"  time   {_hours(h[0])} - {_hours(h[2])} (median {_hours(h[1])})")
    cr = result.creates
    print(f"  creates {cr[0]:.0f} - {cr[2]:.0f}, duds included (median {cr[1]:.0f})")
    print(
        f"  floor  ${result.floor_usd:.2f}: the work on the cheapest listed machine-hours per "
        "reference hour, and one boot"
    )
    if jobs.unsized:
        print(f"  left out: {len(jobs.unsized)} jobs with no size ({', '.join(jobs.unsized)})")
    c0 = inputs.candidates[0]
    print(
        f"  from   p(deliver) {c0.p:.2f} for the first offer ({inputs.odds_runs:.0f} runs' worth "
        f"of odds), a dud caught in {inputs.dud_h * 60:.0f} min, a boot of "
        f"{inputs.boot_h * 60:.0f} min"
    )
    print("  first rentals:")
    for r in first:
        tier = ""
        if r["bid"] is not None:
            tier = f"bid ${r['bid']:.4f}/h (bid_floor ${r['bid_floor']:.4f}/h), "
        per = "" if r["usd_per_ref_hour"] is None else f", ${r['usd_per_ref_hour']:.3f} per ref-h"
        print(
            f"    m:{r['machine_id']} {clean(r['gpu'], 40)}: {tier}on-demand "
            f"${r['on_demand_dph']:.4f}/h{per}"
        )
    return 0
