"""A family of simulated markets: scenarios drawn from documented ranges, so the referee can
judge a policy on markets it was never shaped on. Deterministic: the same family seed and index
give the same market. The ranges are the module's constants and are listed in docs/referee.md.

Tuning a policy happens on TRAINING_FAMILY_SEEDS only; figures are reported on fresh seeds
(REPORT_FAMILY_SEEDS, never used for tuning), as a held-out set should be.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from ..core.gpu_specs import DPH_RANGE
from .scenario import BEHAVIOURS, CONSUMER_GPUS, DELIVERING, Scenario, parse_scenario

TRAINING_FAMILY_SEEDS = (1, 2, 3)
REPORT_FAMILY_SEEDS = (2026, 2027)

# The ranges every market is drawn from (uniform unless said otherwise).
DUD_SHARE = (0.20, 0.80)  # share of machines that never deliver, before bad-day scaling
BAD_DAY_CHANCE = 0.2  # the sim's bad day: about 3 in 4 creates fail whatever the mix
# Delivering mix: weights before normalising; healthy always dominates.
DELIVERING_WEIGHTS = {
    "healthy": (0.5, 1.0),
    "slow_pull": (0.0, 0.35),
    "throttled": (0.0, 0.2),
    "offline_midrun": (0.0, 0.1),
}
# Dud mix: each non-delivering behaviour gets an exponential weight (a flat Dirichlet).
OFFERS = (30, 120)
FLEET_SIZES = (1, 2, 3, 4)
GPU_BILLING = ("running", "created")
QUEUE_MAX_MIN = (0.5, 3.0)  # queue_min = [0.2, this]
PULL_LOW_MIN = (2.0, 12.0)  # pull_min = [low, low * PULL_SPREAD]
PULL_SPREAD = (1.2, 2.5)
SLOW_PULL_LOW_MIN = (12.0, 25.0)  # slow_pull hosts: pull_min = [low, low * SLOW_SPREAD]
SLOW_SPREAD = (1.2, 1.8)
# Extraction shows one unchanged status line: the long silent phase a freeze rule can misread.
EXTRACT_LOW_MIN = (0.5, 3.0)  # extract_min = [low, high]
EXTRACT_HIGH_MIN = (2.0, 10.0)
FATAL_LATEST_MIN = (2.0, 10.0)  # fatal_pull: fatal_at_min = [0.5, this]
PRICE_LOW = (0.08, 0.30)  # $/h; dph = [low, low * PRICE_SPREAD]
PRICE_SPREAD = (1.5, 5.0)
DUD_PRICE_FACTOR = (0.6, 1.1)  # duds' prices against the honest hosts' (often cheaper)
# Prices follow the model, as on the real market: each model's $/h is its range in
# core/gpu_specs.DPH_RANGE (sourced there), times the market's level, so dollars per delivered
# TFLOP spread across a market's offers by 2x or more, the cheap cards the dear ones per TFLOP.
FAMILY_GPUS = [*CONSUMER_GPUS, "RTX 5090", "RTX A5000", "RTX A6000", "L40S", "A100 SXM4"]
FAMILY_GPU_COUNT = (2, 5)  # models listed on one market
PRICE_LEVEL = (0.75, 1.4)  # the market's level against the sourced ranges
FAULTS = {  # per-market API and SSH fault rates, each uniform in [0, high]
    "rate_429": 0.08,
    "rate_5xx": 0.05,
    "rate_timeout": 0.01,
    "rate_malformed": 0.03,
    "ssh_drop": 0.05,
}
# A "slow" answer stalls this many wall seconds. At the referee's time scale (600) that is 5
# market minutes, already far longer than a real hang lasts (the client gives up on a call
# after 20 s); 2 s was 20 market minutes of a poll held up, noise that swamped the policies.
FAULT_TIMEOUT_S = 0.5
# The interruptible tier ([bids], docs/scenarios.md), drawn apart from the rest (its own key):
# a market's rivals per machine-hour, each listed model's own pressure a multiple of it, so
# some markets and models are quiet and others are fought over.
BID_PRESSURE = (0.05, 2.0)
BID_MODEL_SPREAD = (0.25, 3.0)
BID_FLOOR_LOW = (0.22, 0.45)  # min_bid floor = [low, low + width] of the on-demand price
BID_FLOOR_WIDTH = (0.05, 0.25)
BID_DRIFT = (0.05, 0.4)
BID_DAY_SWING = (0.0, 0.8)
BID_ONDEMAND = (0.05, 0.4)
BID_RIVAL_HIGH = (1.2, 2.0)  # a rival's bid = [0.9, this] x the floor
BID_HOLD_LOW_MIN = (5.0, 30.0)
BID_HOLD_HIGH_MIN = (40.0, 240.0)


@dataclass(frozen=True)
class FamilyMarket:
    """One drawn market: its scenario, the fleet the campaign asks for on it, and a price
    ceiling that admits its offers."""

    index: int
    scenario: Scenario
    fleet: int
    max_dph: float
    data: dict[str, Any]  # the scenario as TOML-shaped data, to reproduce it with `rentwatch sim`


def _rng(family_seed: int, index: int, tag: str = "") -> random.Random:
    key = f"rentwatch-family:{family_seed}:{index}" + (f":{tag}" if tag else "")
    digest = hashlib.sha256(key.encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _u(rng: random.Random, lo_hi: tuple[float, float]) -> float:
    return rng.uniform(*lo_hi)


def draw_market(family_seed: int, index: int) -> FamilyMarket:
    """The `index`-th market of family `family_seed`."""
    rng = _rng(family_seed, index)
    dud_share = _u(rng, DUD_SHARE)
    duds = [b for b in BEHAVIOURS if b not in DELIVERING]
    dud_w = {b: rng.expovariate(1.0) for b in duds}
    good_w = {b: _u(rng, DELIVERING_WEIGHTS[b]) for b in DELIVERING_WEIGHTS if b in DELIVERING}
    # the flat price draws of the first families, still drawn (and unused: prices follow the
    # model now) so that the draws after them stay as they were
    rng.sample(CONSUMER_GPUS, rng.randint(2, 4))
    _u(rng, PRICE_LOW), _u(rng, PRICE_SPREAD)
    dud_factor = _u(rng, DUD_PRICE_FACTOR)
    pull_lo = _u(rng, PULL_LOW_MIN)
    pull = [round(pull_lo, 2), round(pull_lo * _u(rng, PULL_SPREAD), 2)]
    slow_lo = _u(rng, SLOW_PULL_LOW_MIN)
    slow = [round(slow_lo, 2), round(slow_lo * _u(rng, SLOW_SPREAD), 2)]
    ex_lo = _u(rng, EXTRACT_LOW_MIN)
    extract = [round(ex_lo, 2), round(max(ex_lo + 0.5, _u(rng, EXTRACT_HIGH_MIN)), 2)]
    queue = [0.2, round(_u(rng, QUEUE_MAX_MIN), 2)]
    fatal = [0.5, round(_u(rng, FATAL_LATEST_MIN), 2)]
    # drawn apart from the rest (its own key), so the other draws stay as they were
    prng = _rng(family_seed, index, "prices")
    gpus = prng.sample(FAMILY_GPUS, prng.randint(*FAMILY_GPU_COUNT))
    level = _u(prng, PRICE_LEVEL)
    prices = {
        g: [
            round(lo * level * _u(prng, (0.9, 1.1)), 3),
            round(hi * level * _u(prng, (0.9, 1.1)), 3),
        ]
        for g in gpus
        for lo, hi in [DPH_RANGE[g]]
    }
    price_hi = max(hi for _, hi in prices.values())
    classes: list[dict[str, Any]] = []
    good_total = sum(good_w.values()) or 1.0
    dud_total = sum(dud_w.values()) or 1.0
    weights = [(b, w / good_total * (1 - dud_share), 1.0) for b, w in good_w.items()]
    weights += [(b, w / dud_total * dud_share, dud_factor) for b, w in dud_w.items()]
    for b, share, factor in weights:
        for g in gpus:
            lo, hi = prices[g]
            cls: dict[str, Any] = {
                "behaviour": b,
                "share": round(share / len(gpus), 4),
                "gpu": [g],
                "dph": [round(lo * factor, 3), round(max(hi * factor, lo * factor + 0.001), 3)],
                "queue_min": queue,
                "extract_min": extract,
                "pull_min": slow if b == "slow_pull" else pull,
            }
            if b == "fatal_pull":
                cls["fatal_at_min"] = fatal
            classes.append(cls)
    classes = [c for c in classes if c["share"] > 0]
    data: dict[str, Any] = {
        "name": f"family-{family_seed}-{index}",
        "seed": rng.randrange(1, 2**31),
        "offers": rng.randint(*OFFERS),
        "bad_day": rng.random() < BAD_DAY_CHANCE,
        "gpu_billing": rng.choice(GPU_BILLING),
        "host_class": classes,
        "faults": {k: round(rng.uniform(0, hi), 4) for k, hi in FAULTS.items()}
        | {"timeout_s": FAULT_TIMEOUT_S},
    }
    data["bids"] = _bids(family_seed, index, gpus)
    fleet = rng.choice(FLEET_SIZES)
    max_dph = round(max(price_hi, price_hi * dud_factor) * 1.01, 3)
    return FamilyMarket(index, parse_scenario(data, data["name"]), fleet, max_dph, data)


def _bids(family_seed: int, index: int, gpus: list[str]) -> dict[str, Any]:
    """One market's `[bids]`: pressure spread across markets and across its models."""
    r = _rng(family_seed, index, "bids")
    base = _u(r, BID_PRESSURE)
    low = _u(r, BID_FLOOR_LOW)
    return {
        "pressure": round(base, 3),
        "floor": [round(low, 3), round(low + _u(r, BID_FLOOR_WIDTH), 3)],
        "drift": round(_u(r, BID_DRIFT), 3),
        "day_swing": round(_u(r, BID_DAY_SWING), 3),
        "peak_hour": round(r.uniform(0, 24), 2),
        "ondemand": round(_u(r, BID_ONDEMAND), 3),
        "rival_bid": [0.9, round(_u(r, BID_RIVAL_HIGH), 3)],
        "hold_min": [round(_u(r, BID_HOLD_LOW_MIN), 1), round(_u(r, BID_HOLD_HIGH_MIN), 1)],
        "gpu_pressure": {g: round(base * _u(r, BID_MODEL_SPREAD), 3) for g in gpus},
    }


def draw_family(family_seed: int, n: int) -> list[FamilyMarket]:
    """Markets 0..n-1 of family `family_seed`."""
    return [draw_market(family_seed, i) for i in range(n)]


def to_toml(data: dict[str, Any]) -> str:
    """A drawn market as a scenario file (`rentwatch sim --scenario` reads it back)."""

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    tables = ("host_class", "faults", "bids")
    lines = [f"{k} = {val(v)}" for k, v in data.items() if k not in tables]
    lines += ["", "[faults]"] + [f"{k} = {val(v)}" for k, v in data["faults"].items()]
    if "bids" in data:
        b = data["bids"]
        lines += ["", "[bids]"] + [f"{k} = {val(v)}" for k, v in b.items() if k != "gpu_pressure"]
        lines += ["", "[bids.gpu_pressure]"]
        lines += [f"{val(g)} = {val(p)}" for g, p in b.get("gpu_pressure", {}).items()]
    for cls in data["host_class"]:
        lines += ["", "[[host_class]]"] + [f"{k} = {val(v)}" for k, v in cls.items()]
    return "\n".join(lines) + "\n"
