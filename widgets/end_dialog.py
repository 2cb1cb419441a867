"""Ending the campaign from the dashboard (`E`): everything it still holds is listed first, as
`rentwatch end` lists it (the ledger's `holdings` rows: verified or not, outputs not pulled
off, storage per day), and the person types the campaign's name to destroy all of it."""

from __future__ import annotations

from collections.abc import Sequence

from rentwatch.core.text import clean
from rentwatch.ledger.holdings import Holding
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

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
        "No more creates; every rental above is destroyed, verified ones too: their disks "
        "and what was not pulled off are lost, and nothing bills after. Recorded as your act; "
        "it cannot be undone. "
    )
    t.append(f"Type the campaign's name ({name}) and press Enter.", style="bold")
    return t


class EndConfirm(ModalScreen[str | None]):
    """Dismissed with what was typed once it is the campaign's name; None (Escape, Cancel, an
    empty Enter) ends nothing."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, campaign: str, held: Sequence[Holding], error: str = "") -> None:
        super().__init__()
        self.campaign = campaign
        self.held = tuple(held)
        self.error = error

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(holdings_text(self.campaign, self.held, self.error))
            # one line each (compact): at 80x24 the list of five rentals fits whole with them
            yield Input(
                placeholder=f"type {clean(self.campaign, 60)} to confirm", id="typed", compact=True
            )
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel", variant="primary", compact=True)
                yield Button("End and destroy everything", id="end", variant="error", compact=True)

    def on_mount(self) -> None:
        self.query_one("#typed", Input).focus(scroll_visible=False)
        # opened at its heading: a list too long to fit scrolls down to the name's box, not
        # the question and the first rentals off screen
        self.call_after_refresh(self.query_one("#dialog").scroll_home, animate=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self.dismiss(None)
            return
        self._try(event.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "end":
            self._try(self.query_one("#typed", Input).value)
        else:
            self.dismiss(None)

    def _try(self, typed: str) -> None:
        if typed.strip() == self.campaign:
            self.dismiss(typed.strip())
            return
        self.query_one("#typed", Input).value = ""
        self.notify(
            f"that is not {clean(self.campaign, 60)!r}: nothing ended. Type it exactly, or Escape.",
            severity="warning",
        )

    def action_cancel(self) -> None:
        self.dismiss(None)
