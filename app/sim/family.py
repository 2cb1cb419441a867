"""A family of simulated markets drawn from documented ranges (docs/fidelity.md), deterministic in
(family seed, index); a range with no public source is named in `UNKNOWNS`."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

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
OFFERS = (60, 240)  # verified machines; about a quarter of them listed at once (CHURN_*)
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
PRICE_LOW = (0.08, 0.30)  # drawn and unused (see draw_market), so later draws stay put
PRICE_SPREAD = (1.5, 5.0)
DUD_PRICE_FACTOR = (0.6, 1.1)  # duds' prices against the honest hosts' (an assumption)
# Each model's median on-demand $/h per GPU on a market falls in this band (uniform), from
# MARKET_EVIDENCE.md: SkyPilot's catalog v6/v7/v8 (median `search.totalHour` per type), dstack
# #4026, the RTX 5090 scraper. [E]: no public figure; placed between the sourced models by
# speed and VRAM.
MODEL_DPH: dict[str, tuple[float, float]] = {
    "RTX 3060": (0.15, 0.27),  # v6 spot 0.15, v6/v8 price 0.27
    "RTX 3070": (0.15, 0.26),  # [E]
    "RTX 3080": (0.17, 0.30),  # [E]
    "RTX 3090": (0.17, 0.40),  # v8 0.165 per GPU of a 2x, v6 0.40
    "RTX 4070": (0.16, 0.28),  # [E]
    "RTX 4080": (0.20, 0.36),  # [E]
    "RTX 4090": (0.24, 0.40),  # dstack #4026 ~0.24, v6/v8 0.40
    "RTX 5090": (0.48, 0.67),  # v8 0.48, v6 0.67, scraper median 0.535
    "RTX A5000": (0.18, 0.32),  # [E]
    "RTX A6000": (0.42, 0.56),  # v8 0.425 per GPU, v6 0.56
    "L40S": (0.55, 0.70),  # v8 0.60
    "A100 SXM4": (0.76, 0.90),  # v8 A100 SXM4 40G 0.76; A100 80G PCIe 0.87
    "H100 SXM": (1.80, 2.13),  # v7 1.80, v8 1.87, v6 2.13
    "H200": (2.47, 3.00),  # v7 2.47, v8 2.65
}
FAMILY_GPUS = list(MODEL_DPH)
FAMILY_GPU_COUNT = (2, 5)  # models listed on one market
# Offers of one model spread around its median: [m x (1 - w), m x (1 + w)] (the scraper's
# 1-GPU 5090s: min 0.53x and max 2.5x of the median; we keep the tails shorter)
PRICE_WIDTH = (0.25, 0.5)
# min_bid / on-demand (MARKET_EVIDENCE.md "The interruptible floor"): many hosts at or near
# on-demand (single offers 0.81, 0.99, 1.00, 1.00), a tail of deep discounts (Vast's FAQ:
# "saves 50-80%"); the scraper's median bid/ask ratio 0.60.
BID_NEAR_SHARE = (0.35, 0.65)
BID_NEAR = (0.85, 1.0)
# Churn (the scraper): each machine's share of time listed, log-uniform in [low, 1]; the median
# machine at sqrt(low): 0.14-0.22 (the scraper: 17%, 44% of machines under 13%, 8% over 90%)
CHURN_PRESENCE_LOW = (0.02, 0.05)
# Verification of offer rows (philipchu/vast_monitor): ~52% verified, ~28% deverified, ~20%
# unverified; `verification` is Vast's field ("verified" / "deverified" / "unverified")
UNVERIFIED_SHARE = (0.17, 0.23)
DEVERIFIED_SHARE = (0.25, 0.31)
EXTERNAL_SHARE = 0.1  # of the verified offers, as the default scenario's `[listing]`
# Storage $/GB-month on single offers: 0.0013, 0.149, 0.60, 0.93 (log-uniform between the ends)
STORAGE_LOW = (0.001, 0.005)
STORAGE_HIGH = (0.6, 0.93)
# Bandwidth $/GB on single offers: 0, 0.0012, 0.0020; egress "$0-50/TB" (ccir.io)
BANDWIDTH_HIGH = (0.002, 0.05)
# Line speeds are bimodal (78/106, 289/476, 450/677, 2241/2118 Mbps up/down on single offers)
INET_FAST_SHARE = (0.15, 0.45)
# What no public source shows: each a range the family samples (and a scenario knob).
RELIABILITY_SIGNAL = (0.0, 0.6)  # [hosts] reliability_signal
CHURN_WINDOW_MIN = (15.0, 90.0)  # [churn] window_min: how long one listing state lasts
TAKEN_SHARE = (0.0, 0.1)  # [listing] taken: a create that finds the offer just taken
BID_PRICING = ("bid", "clearing")  # [bids] pricing
# [price_rise]: hosts that raise their price under a held rental (vast-cli PR #401 shows the
# flow; no source shows how often, by how much, with how much notice, or whether a rejected
# rise's contract ever runs on at the old price)
PRICE_RISE_SHARE = (0.0, 0.15)
PRICE_RISE_FACTOR_HIGH = (1.1, 2.0)
PRICE_RISE_NOTICE_MIN = (15.0, 240.0)
PRICE_RISE_KEEP_OLD = (0.0, 0.5)
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
# the deep-discount tail: min_bid floor = [low, low + width] of the on-demand price
BID_FLOOR_LOW = (0.15, 0.35)
BID_FLOOR_WIDTH = (0.1, 0.3)
BID_DRIFT = (0.05, 0.4)
BID_DAY_SWING = (0.0, 0.8)
BID_ONDEMAND = (0.05, 0.4)
BID_RIVAL_HIGH = (1.2, 2.0)  # a rival's bid = [0.9, this] x the floor
BID_HOLD_LOW_MIN = (5.0, 30.0)
BID_HOLD_HIGH_MIN = (40.0, 240.0)


def _unknown(sampled: tuple[Any, ...], knob: str, about: str = "") -> dict[str, Any]:
    return {"range": sampled, "knob": knob} | ({"about": about} if about else {})


# Every assumption above with no public source: the range each market samples, and the knob
# that sets it in a scenario file (`rentwatch scenario describe` prints them).
UNKNOWNS: dict[str, dict[str, Any]] = {
    "dud_share": _unknown(
        DUD_SHARE,
        "[[host_class]] share",
        "share of machines that never deliver (the article: 62 of 100 creates)",
    ),
    "bad_day_chance": _unknown((BAD_DAY_CHANCE, BAD_DAY_CHANCE), "bad_day"),
    "dud_price_factor": _unknown(
        DUD_PRICE_FACTOR, "[[host_class]] dph", "a dud's price against its model's honest hosts"
    ),
    "outbid_pressure": _unknown(
        BID_PRESSURE, "[bids] pressure", "rivals arriving per machine-hour on the bid tier"
    ),
    "outbid_model_spread": _unknown(BID_MODEL_SPREAD, "[bids] gpu_pressure"),
    "outbid_day_swing": _unknown(BID_DAY_SWING, "[bids] day_swing"),
    "rival_bid_high": _unknown(BID_RIVAL_HIGH, "[bids] rival_bid"),
    "rival_ondemand_share": _unknown(BID_ONDEMAND, "[bids] ondemand"),
    "rival_hold_min": _unknown((BID_HOLD_LOW_MIN[0], BID_HOLD_HIGH_MIN[1]), "[bids] hold_min"),
    "min_bid_drift": _unknown(BID_DRIFT, "[bids] drift"),
    "bid_pricing": _unknown(
        BID_PRICING, "[bids] pricing", "a winning bid pays its own bid or what it had to beat"
    ),
    "reliability_signal": _unknown(
        RELIABILITY_SIGNAL,
        "[hosts] reliability_signal",
        "how far the listed reliability2 tells the hosts that never deliver apart",
    ),
    "churn_window_min": _unknown(CHURN_WINDOW_MIN, "[churn] window_min"),
    "taken_share": _unknown(TAKEN_SHARE, "[listing] taken"),
    "inet_fast_share": _unknown(
        INET_FAST_SHARE,
        "[hosts] inet_fast_share",
        "lines are bimodal on four single offers; the share of fast ones is unknown",
    ),
    "price_rise_share": _unknown(
        PRICE_RISE_SHARE,
        "[price_rise] share",
        "share of on-demand rentals whose host raises its price while rented",
    ),
    "price_rise_factor": _unknown(
        (1.05, PRICE_RISE_FACTOR_HIGH[1]), "[price_rise] factor", "a rise's new price over the old"
    ),
    "price_rise_notice_min": _unknown(
        PRICE_RISE_NOTICE_MIN,
        "[price_rise] notice_min",
        "minutes from a rise to the contract's end date, when it would apply",
    ),
    "price_rise_keep_old": _unknown(
        PRICE_RISE_KEEP_OLD,
        "[price_rise] keep_old",
        "share of rejected or unanswered rises whose contract runs on at the old price",
    ),
    **{f"fault_{k}": _unknown((0.0, hi), f"[faults] {k}") for k, hi in FAULTS.items()},
}


@dataclass(frozen=True)
class FamilyMarket:
    """One drawn market: its scenario, the fleet asked for, a ceiling that admits its offers."""

    index: int
    scenario: Scenario
    fleet: int
    max_dph: float
    data: dict[str, Any]  # the scenario as TOML-shaped data, to reproduce it with `rentwatch sim`


def _rng(family_seed: int, index: int, tag: str = "") -> random.Random:
    key = f"rentwatch-family:{family_seed}:{index}" + (f":{tag}" if tag else "")
    digest = hashlib.sha256(key.encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw_market(family_seed: int, index: int) -> FamilyMarket:
    rng = _rng(family_seed, index)
    dud_share = rng.uniform(*DUD_SHARE)
    duds = [b for b in BEHAVIOURS if b not in DELIVERING]
    dud_w = {b: rng.expovariate(1.0) for b in duds}
    good_w = {b: rng.uniform(*DELIVERING_WEIGHTS[b]) for b in DELIVERING_WEIGHTS if b in DELIVERING}
    # the flat price draws of the first families, still drawn (and unused: prices follow the
    # model now) so that the draws after them stay as they were
    rng.sample(CONSUMER_GPUS, rng.randint(2, 4))
    rng.uniform(*PRICE_LOW), rng.uniform(*PRICE_SPREAD)
    dud_factor = rng.uniform(*DUD_PRICE_FACTOR)
    pull_lo = rng.uniform(*PULL_LOW_MIN)
    pull = [round(pull_lo, 2), round(pull_lo * rng.uniform(*PULL_SPREAD), 2)]
    slow_lo = rng.uniform(*SLOW_PULL_LOW_MIN)
    slow = [round(slow_lo, 2), round(slow_lo * rng.uniform(*SLOW_SPREAD), 2)]
    ex_lo = rng.uniform(*EXTRACT_LOW_MIN)
    extract = [round(ex_lo, 2), round(max(ex_lo + 0.5, rng.uniform(*EXTRACT_HIGH_MIN)), 2)]
    queue = [0.2, round(rng.uniform(*QUEUE_MAX_MIN), 2)]
    fatal = [0.5, round(rng.uniform(*FATAL_LATEST_MIN), 2)]
    # drawn apart from the rest (its own key), so the other draws stay as they were
    prng = _rng(family_seed, index, "prices")
    gpus = prng.sample(FAMILY_GPUS, prng.randint(*FAMILY_GPU_COUNT))
    # each model's median across all its offers lands in its band: the honest hosts are
    # priced up by what the duds' discount takes off the mixture
    honest = 1.0 / ((1 - dud_share) + dud_share * dud_factor)
    prices = {}
    for g in gpus:
        mid, w = prng.uniform(*MODEL_DPH[g]) * honest, prng.uniform(*PRICE_WIDTH)
        prices[g] = [round(mid * (1 - w), 3), round(mid * (1 + w), 3)]
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
    data["price_rise"] = _price_rise(family_seed, index)
    data.update(_supply(family_seed, index))
    fleet = rng.choice(FLEET_SIZES)
    max_dph = round(max(price_hi, price_hi * dud_factor) * 1.01, 3)
    return FamilyMarket(index, parse_scenario(data, data["name"]), fleet, max_dph, data)


def _supply(family_seed: int, index: int) -> dict[str, Any]:
    """One market's listings as the evidence shows them: verification, churn, storage,
    bandwidth and lines (drawn apart from the rest: its own key)."""
    r = _rng(family_seed, index, "supply")
    unverified, deverified = r.uniform(*UNVERIFIED_SHARE), r.uniform(*DEVERIFIED_SHARE)
    verified_rows = (1 - unverified - deverified) / (1 + EXTERNAL_SHARE)  # of all rows
    return {
        "storage_cost": [round(r.uniform(*STORAGE_LOW), 4), round(r.uniform(*STORAGE_HIGH), 3)],
        "bandwidth_cost": [0.0, round(r.uniform(*BANDWIDTH_HIGH), 4)],
        "listing": {
            "unverified": round(unverified / verified_rows, 4),
            "deverified": round(deverified / verified_rows, 4),
            "external": EXTERNAL_SHARE,
            "taken": round(r.uniform(*TAKEN_SHARE), 4),
        },
        "churn": {
            "presence": [round(r.uniform(*CHURN_PRESENCE_LOW), 4), 1.0],
            "window_min": round(r.uniform(*CHURN_WINDOW_MIN), 1),
            "relist_new_id": True,
        },
        "hosts": {
            "inet_fast_share": round(r.uniform(*INET_FAST_SHARE), 3),
            "reliability_signal": round(r.uniform(*RELIABILITY_SIGNAL), 3),
            "storage_spread": "log",
        },
    }


def _bids(family_seed: int, index: int, gpus: list[str]) -> dict[str, Any]:
    """One market's `[bids]`: pressure spread across markets and across its models."""
    r = _rng(family_seed, index, "bids")
    base = r.uniform(*BID_PRESSURE)
    low = r.uniform(*BID_FLOOR_LOW)
    return {
        "near_share": round(r.uniform(*BID_NEAR_SHARE), 3),
        "near": list(BID_NEAR),
        "pricing": r.choice(BID_PRICING),
        "pressure": round(base, 3),
        "floor": [round(low, 3), round(low + r.uniform(*BID_FLOOR_WIDTH), 3)],
        "drift": round(r.uniform(*BID_DRIFT), 3),
        "day_swing": round(r.uniform(*BID_DAY_SWING), 3),
        "peak_hour": round(r.uniform(0, 24), 2),
        "ondemand": round(r.uniform(*BID_ONDEMAND), 3),
        "rival_bid": [0.9, round(r.uniform(*BID_RIVAL_HIGH), 3)],
        "hold_min": [
            round(r.uniform(*BID_HOLD_LOW_MIN), 1),
            round(r.uniform(*BID_HOLD_HIGH_MIN), 1),
        ],
        "gpu_pressure": {g: round(base * r.uniform(*BID_MODEL_SPREAD), 3) for g in gpus},
    }


def _price_rise(family_seed: int, index: int) -> dict[str, Any]:
    r = _rng(family_seed, index, "price_rise")
    notice = sorted(round(r.uniform(*PRICE_RISE_NOTICE_MIN), 1) for _ in range(2))
    return {
        "share": round(r.uniform(*PRICE_RISE_SHARE), 3),
        "factor": [1.05, round(r.uniform(*PRICE_RISE_FACTOR_HIGH), 3)],
        "after_min": [10.0, 240.0],
        "notice_min": notice,
        "keep_old": round(r.uniform(*PRICE_RISE_KEEP_OLD), 3),
    }


def draw_family(family_seed: int, n: int) -> list[FamilyMarket]:
    return [draw_market(family_seed, i) for i in range(n)]
