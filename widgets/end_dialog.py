"""Ending the campaign from the dashboard (`E`): everything it still holds is listed first, as
`rentwatch end` lists it (the ledger's `holdings` rows: verified or not, outputs not pulled
off, storage per day), and the person types the campaign's name to destroy all of it."""

from __future__ import annotations

from collections.abc import Sequence

from rentwatch.core.text import clean
from rentwatch.ledger.holdings import Holding
from rich.text import Text

from .modals import TypedConfirm

SHOWN = 12  # rentals listed one by one; the rest are counted


def holdings_text(campaign: str, held: Sequence[Holding], error: str = "") -> Text:
    """The question and the list: what the destroy loses, what it stops billing."""
    name = clean(campaign, 60)
    t = Text()
    t.append(f"End {name} and destroy everything it holds?\n\n", style="bold red")
    if error:
        t.append(Text(f"could not read what it holds from the ledger: {clean(error, 200)}\n"))
        t.append("Every rental the engine still holds is destroyed all the same.\n\n")
    verified = sum(1 for h in held if h.verified)
    unpulled = sum(1 for h in held if h.unpulled)
    per_day = sum(h.storage_usd_per_day for h in held)
    live_dph = sum(h.gpu_usd_per_h for h in held if not h.stopped)
    if not error:
        t.append(
            f"It holds {len(held)} rental(s): {verified} verified, {len(held) - verified} "
            f"never verified, {unpulled} with outputs not pulled off; storage "
            f"${per_day:.3f}/day in all"
            + (f", GPUs ${live_dph:.3f}/h" if live_dph else "")
            + ".\n",
            style="bold",
        )
    for h in held[:SHOWN]:
        t.append("  ")
        t.append(Text(clean(h.line(), 200), style="red" if h.verified or h.unpulled else ""))
        t.append("\n")
    if len(held) > SHOWN:
        t.append(f"  … and {len(held) - SHOWN} more\n")
    t.append(
        "\nNo more creates. Every rental above is destroyed, verified ones included: their "
        "disks and anything not pulled off are lost, and nothing of the campaign bills "
        "after. Recorded in the ledger as your act. It cannot be undone.\n\n"
    )
    t.append(f"Type the campaign's name ({name}) and press Enter.")
    return t


class EndConfirm(TypedConfirm):
    """Dismissed with what was typed once it is the campaign's name; None (Escape, Cancel, an
    empty Enter) ends nothing."""

    act = ("end", "End and destroy everything")
    scroll = True

    def __init__(self, campaign: str, held: Sequence[Holding], error: str = "") -> None:
        super().__init__()
        self.campaign = campaign
        self.held = tuple(held)
        self.error = error

    def body(self) -> Text:
        return holdings_text(self.campaign, self.held, self.error)

    def placeholder(self) -> str:
        return f"type {clean(self.campaign, 60)} to confirm"

    def confirmed(self, typed: str) -> str | None:
        return typed.strip() if typed.strip() == self.campaign else None

    def wrong(self, typed: str) -> str:
        return (
            f"that is not {clean(self.campaign, 60)!r}: nothing ended. Type it exactly, or Escape."
        )
