"""Listings that come and go under `[churn]`, relisted under another offer id (docs/fidelity.md):
a pure function of (seed, machine, time)."""

from __future__ import annotations

import math
from functools import lru_cache

from .machines import Machine, keyed_rng
from .scenario import Churn

RELIST_IDS = 3  # offer ids a machine's listings take turns with
_WALK_BACK = 96  # windows looked back for where the current listing began


def presence(seed: int, c: Churn, m: Machine) -> float:
    """The machine's share of time listed: log-uniform over `c.presence`."""
    lo, hi = c.presence
    if lo >= 1.0:
        return 1.0
    u = keyed_rng(seed, "presence", m.id).random()
    return float(lo * (hi / lo) ** u)


@lru_cache(maxsize=262_144)
def _listed(seed: int, machine_id: int, share: float, k: int) -> bool:
    return keyed_rng(seed, "listed", machine_id, k).random() < share


def window(c: Churn, t: float) -> int:
    return math.floor(t / (c.window_min * 60.0))


def listed(seed: int, c: Churn, m: Machine, t: float) -> bool:
    """Whether the machine is on the market at `t` (another renter holds it otherwise)."""
    share = presence(seed, c, m) if m.presence is None else m.presence
    return share >= 1.0 or _listed(seed, m.id, share, window(c, t))


def offer_ids(m: Machine) -> list[int]:
    """The ids the machine's listings take turns with (the first is the one it starts with)."""
    last = m.offer_id % 10
    base = m.offer_id - last
    return [base + (last + 3 * j) % 10 for j in range(RELIST_IDS)]


def index(seed: int, c: Churn, machines: list[Machine]) -> dict[int, Machine]:
    for m in machines:
        m.presence = presence(seed, c, m)
    return {oid: m for m in machines for oid in (offer_ids(m) if c.relist_new_id else [m.offer_id])}


def offer_id_at(seed: int, c: Churn, m: Machine, t: float) -> int:
    """The offer id the machine is listed under at `t`: one id per listing, drawn when the
    listing began (so a machine listed again may show another id, or an old one again)."""
    share = presence(seed, c, m) if m.presence is None else m.presence
    if not c.relist_new_id or share >= 1.0:
        return m.offer_id
    k = window(c, t)
    start = k
    while start > k - _WALK_BACK and _listed(seed, m.id, share, start - 1):
        start -= 1
    # a listing that lasts the whole walk keeps the machine's standing id, so that one id holds
    # however long the listing lasts (seen from its start or from past the walk)
    if all(_listed(seed, m.id, share, j) for j in range(start, start + _WALK_BACK)):
        return m.offer_id
    pick = keyed_rng(seed, "relist", m.id, start).randrange(RELIST_IDS)
    return offer_ids(m)[pick]


def listed_share(seed: int, c: Churn, m: Machine, lo: float, hi: float) -> float:
    if hi <= lo:
        return 0.0
    w = c.window_min * 60.0
    total = 0.0
    for k in range(window(c, lo), window(c, hi) + 1):
        a, b = max(lo, k * w), min(hi, (k + 1) * w)
        if b > a and listed(seed, c, m, a):
            total += b - a
    return total / (hi - lo)
