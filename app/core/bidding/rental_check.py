"""Whether a rental is what its create asked for: its type (bid or on-demand) and its price, read
off the market's row of it right after the create.

Why: a create without its bid price rents on-demand, its answer does not say which type was
rented (vast-cli PR #403), and the type cannot change after the create (vast-ai/docs
`instance-types.mdx`). The wrong type is replaced, a bid recorded at another bid is bid again,
and an on-demand rental over the ceiling is replaced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..models import Instance

Fix = Literal["replace", "rebid", "keep"]


@dataclass(frozen=True, slots=True)
class Mismatch:
    what: Literal["type", "price"]
    fix: Fix
    reason: str
    rented_bid: bool | None  # the type the row says (None: it cannot be told)
    dph: float  # the row's GPU price, $/h


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= max(5e-4, 0.005 * max(a, b))


def rented_bid(asked_bid: float | None, offer_dph: float, inst: Instance) -> bool | None:
    """The rental's type as its row says it: `interruptible` where present; else, for a bid create,
    its price (its bid, or the offer's on-demand price where those differ); else unknown."""
    if inst.interruptible is not None:
        return inst.interruptible
    if asked_bid is None or _same(asked_bid, offer_dph):
        return None
    if _same(inst.gpu_dph, asked_bid):
        return True
    if _same(inst.gpu_dph, offer_dph):
        return False
    return None


def rental_mismatch(
    asked_bid: float | None, offer_dph: float, max_dph: float, inst: Instance
) -> Mismatch | None:
    """What is not as asked of the rental `inst` (None: it is as asked). `asked_bid`: the bid
    the create sent (None: on-demand); `offer_dph`: the offer's on-demand GPU price."""
    interruptible = rented_bid(asked_bid, offer_dph, inst)
    dph = inst.gpu_dph
    if asked_bid is not None and interruptible is False:
        why = (
            f"asked for a bid at ${asked_bid:.4f}/h; the market rented it on-demand at ${dph:.4f}/h"
        )
        return Mismatch("type", "replace", why, False, dph)
    if asked_bid is None and interruptible is True:
        why = (
            f"asked for on-demand; the market rented it as a bid (it can be outbid) at ${dph:.4f}/h"
        )
        return Mismatch("type", "replace", why, True, dph)
    if asked_bid is not None and interruptible and not _same(dph, asked_bid):
        why = f"asked for a bid at ${asked_bid:.4f}/h; the market holds it at ${dph:.4f}/h"
        return Mismatch("price", "rebid", why, True, dph)
    if asked_bid is None and dph > offer_dph and not _same(dph, offer_dph):
        over = dph > max_dph and not _same(dph, max_dph)
        why = f"priced ${dph:.4f}/h; its offer said ${offer_dph:.4f}/h" + (
            f", over the campaign's ${max_dph:.4f}/h ceiling" if over else ""
        )
        return Mismatch("price", "replace" if over else "keep", why, interruptible, dph)
    return None
