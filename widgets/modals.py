"""Confirmations: the one typed confirmation (destroy one: type its id; destroy the listed),
the quit and detach choices, and help."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from rentwatch.views.acts import stop_shrinks
from rentwatch.views.snapshot import InstanceSnap
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from .keys import KeyLine, key_lines


class TypedConfirm(ModalScreen[str | None]):
    """The one typed confirmation (destroy one, destroy the listed, end the campaign): what is
    lost, a box for the words that confirm it (`phrase`), Cancel and the act. The box has the
    focus, as the last line says; it opens at its heading, scrolled only where it cannot fit.
    Dismissed with what was typed once it is the phrase; None (Escape, Cancel, an empty Enter)
    does nothing."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    AUTO_FOCUS = "#typed"  # as it opens: keys typed at once go into the box, none lost

    def __init__(self, phrase: str, body: Text, act: str, nothing: str) -> None:
        super().__init__()
        self.phrase = phrase
        self.body = body
        self.act = act  # the act's button
        self.nothing = nothing  # what a wrong phrase did: "nothing destroyed"

    def matches(self, typed: str) -> bool:
        return typed.strip() == self.phrase

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(self.body)
            # one line each (compact): a list of five rentals fits whole at 80x24 with them
            yield Input(placeholder=f"type {self.phrase} to confirm", id="typed", compact=True)
            # why a wrong phrase did nothing, in the dialog: a toast beside it went unseen
            refused = Static(id="refused")
            refused.display = False
            yield refused
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel", variant="primary", compact=True)
                yield Button(self.act, id="confirm", variant="error", compact=True)

    def on_mount(self) -> None:
        self.query_one("#typed", Input).focus(scroll_visible=False)
        # a list too long to fit opens at its heading, not scrolled down to the focused box
        self.call_after_refresh(self.query_one("#dialog").scroll_home, animate=False)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self.dismiss(None)  # Enter with nothing typed is a cancel
            return
        self._try(event.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "confirm":
            self._try(self.query_one("#typed", Input).value)
        else:
            self.dismiss(None)

    def _try(self, typed: str) -> None:
        if self.matches(typed):
            self.dismiss(self.phrase)
            return
        shown = Text(typed.strip()[:20]).plain.encode("ascii", "replace").decode()
        self.query_one("#typed", Input).value = ""
        refused = self.query_one("#refused", Static)
        refused.update(Text(self.refusal(shown), style="bold red"))
        refused.display = True

    def refusal(self, typed: str) -> str:
        """Why `typed` (made printable) confirmed nothing."""
        return f"{typed!r} is not {self.phrase}: {self.nothing}. Type it exactly, or Escape."

    def action_cancel(self) -> None:
        self.dismiss(None)


class DestroyConfirm(TypedConfirm):
    """Destroying loses the disk and any unfinished work: the operator types the instance id."""

    def __init__(self, snap: InstanceSnap, rentals: Collection[int]) -> None:
        s = snap
        loss = (
            "its disk and any unfinished work on it"
            if s.passed_preflight
            else "an attempt that never passed its preflight"
        )
        body = Text()
        body.append(f"Destroy instance {s.instance_id}?\n\n", style="bold red")
        body.append(
            Text(
                f"{s.gpu_name} on machine {s.machine_id}, {s.phase}, billed ${s.billed_usd:.4f} so far.\n"
            )
        )
        body.append(f"This loses {loss}. It cannot be undone.\n\n")
        body.append(f"Type {s.instance_id} and press Enter to destroy.")
        super().__init__(str(s.instance_id), body, "Destroy", "nothing destroyed")
        self.snap = snap
        self.rentals = frozenset(rentals)  # the campaign's, as the fleet shows them

    def refusal(self, typed: str) -> str:
        if not typed.isdigit() or int(typed) == self.snap.instance_id:
            return super().refusal(typed)
        if int(typed) in self.rentals:
            return (
                f"{typed} is another of the campaign's rentals, not the one selected: "
                f"{self.nothing}. Type {self.phrase}, or Escape."
            )
        return (
            f"{typed} is not one of the campaign's rentals: {self.nothing}. "
            f"Type {self.phrase}, or Escape."
        )


def storage_note(stopped: int) -> str:
    """What stopped rentals still cost: a stopped instance keeps its disk, and its storage
    bills until it is destroyed (Vast's billing; docs/fidelity.md)."""
    if not stopped:
        return ""
    return (
        f"\n{stopped} stopped rental(s) are not running but still bill storage until "
        "destroyed; leaving does not change that."
    )


def billing_note(
    campaign: str | None,
    dph: float,
    held: int,
    stopped: int,
    end: str = "",
    built_in: bool = False,
    outlives: bool = True,
) -> str:
    """What keeps billing after this dialog, and how to end it: a stop leaves a disk billing
    storage, so neither "stop" nor "leave" ends the bill; only a destroy does. `end` is the
    engine's own `rentwatch end` command (its ledger and market named), as it works pasted.
    A market `built_in` to the engine's process (the demo's) ends with it, rentals and all:
    after that no command can reach it, and nothing bills."""
    if not held and not stopped:
        return ""
    command = end or f"rentwatch end --campaign {campaign or 'NAME'} --destroy"
    if built_in:
        home = "the controller" if outlives else "this process"
        return (
            f"\n\nBilling now: ${dph:.3f}/h on the built-in simulated market (no account is "
            f"charged), which lives in {home}: when it exits, the market and every rental on "
            "it end with it, and nothing is left billing."
            + (
                " Left running, its rentals bill on until ended: attach and press E, or "
                f"`{command}` while it runs."
                if outlives
                else ""
            )
        )
    return (
        f"\n\nBilling now: ${dph:.3f}/h. Stopped rentals, and the verified ones a stop "
        "keeps, bill storage until they are destroyed. To leave nothing billing: Cancel, "
        f"then E (end the campaign and destroy everything), or `{command}` later."
    )


def holding(held: int, stopped: int) -> str:
    """What the campaign holds, as the quit question says it: live rentals (booting or
    running), and the stopped ones beside them ("holds 0 instance(s)" beside "5 stopped
    rental(s)" read as a contradiction)."""
    return f"{held} live instance(s)" + (f" and {stopped} stopped" if stopped else "")


@dataclass(frozen=True)
class Choice:
    id: str
    label: str
    variant: str = "default"


CANCEL = Choice("cancel", "Cancel")


class ChoiceScreen(ModalScreen[str | None]):
    """One question, its buttons, and what each does said in the text: quitting (stop the
    campaign, leave it running or detach, cancel) and the detach key. Escape and Cancel
    answer None; `focus` names the button Enter presses (Cancel where one stray key must not
    leave a fleet unwatched)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, purpose: str, text: str, choices: tuple[Choice, ...], focus: str) -> None:
        super().__init__()
        self.purpose = purpose  # "quit", "detach" or "hand_over": which question this is
        self.text = text
        self.choices = choices
        self.focus_id = focus

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(Text(self.text, style="bold"))
            with Horizontal(classes="buttons"):
                for c in self.choices:
                    yield Button(c.label, id=c.id, variant=c.variant)  # type: ignore[arg-type]

    def on_mount(self) -> None:
        self.query_one(f"#{self.focus_id}", Button).focus()
        # where the dialog must scroll, it opens on its question, not on the focused button
        self.call_after_refresh(self.query_one("#dialog").scroll_home, animate=False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


def ended_choice(
    reason: str, campaign: str | None, end: str, built_in: bool = False
) -> ChoiceScreen:
    """Quit, once the controller this dashboard was attached to has ended on its own: why, in
    its own words, and only quitting (there is nothing left to stop or leave running), with
    the command that ends what the campaign left on the market; a market `built_in` to the
    controller ended with it, and nothing of it is left to end."""
    left = (
        "Its built-in simulated market ended with it, and every rental on it: nothing is "
        "left billing."
        if built_in
        else "Whatever it left on the market still bills until ended"
        + (f":\n  {end}" if end else ".")
    )
    text = (
        f"The controller of {campaign or 'the campaign'} has ended: {reason}.\n\n"
        "Nothing supervises the campaign now, and nothing here can stop it or leave it "
        "running: quit. " + left
    )
    return ChoiceScreen("quit", text, (Choice("ended", "Quit", "primary"), CANCEL), "ended")


def quit_choice(
    held: int,
    stopped: int = 0,
    campaign: str | None = None,
    outlives: bool = False,
    focus: str = "stop",
    dph: float = 0.0,
    end: str = "",
    built_in: bool = False,
) -> ChoiceScreen:
    """Quit, attached to a controller of its own (`outlives`): stop the campaign, or leave it
    running in the background; with the engine in this process: stop all, or detach the fleet
    (left running with nobody supervising it but the host watchdogs)."""
    name = campaign or "the campaign"
    if outlives:
        text = (
            f"Quit the dashboard? {name} holds {holding(held, stopped)}.\n\n"
            "Stop campaign: the controller stops verified instances, destroys the rest, "
            "and exits.\n"
            "Leave running: the controller keeps supervising in the background; re-attach "
            f"with `rentwatch attach --campaign {name}`.\n"
            "Cancel: back to the dashboard."
            + storage_note(stopped)
            + billing_note(campaign, dph, held, stopped, end, built_in)
        )
        choices = (
            Choice("stop", "Stop campaign and quit", "primary"),
            Choice("leave", "Leave running", "success"),
            CANCEL,
        )
    else:
        text = (
            f"Quit rentwatch? It holds {holding(held, stopped)}, and its engine ends with this "
            "dashboard.\n\n"
            "Stop all: verified instances are stopped, the rest destroyed (default).\n"
            "Detach: leave them running, unsupervised but for their host watchdogs "
            "(recorded in the ledger).\n"
            "Cancel: back to the dashboard."
            + storage_note(stopped)
            + billing_note(campaign, dph, held, stopped, end, built_in, outlives=False)
        )
        choices = (
            Choice("stop", "Stop all and quit", "primary"),
            Choice("detach", "Detach", "warning"),
            CANCEL,
        )
    return ChoiceScreen("quit", text, choices, focus)


def detach_choice(held: int, stopped: int = 0) -> ChoiceScreen:
    """Detaching the fleet leaves it billing with nobody watching but the host watchdogs: one
    stray key must not do that, so it asks, with Cancel focused."""
    text = (
        f"Detach and quit? {held} instance(s) keep running and billing, watched only by "
        "their host watchdogs, until a controller adopts them." + storage_note(stopped)
    )
    choices = (CANCEL, Choice("detach", "Detach and quit", "warning"))
    return ChoiceScreen("detach", text, choices, "cancel")


def stop_choice(snap: InstanceSnap, fleet: int) -> ChoiceScreen | None:
    """The question `s` asks before a stop that interrupts a job or lowers the wanted fleet
    (None: a plain stop, nothing to say), naming both, Cancel focused."""
    job = snap.job.split(": ", 1)[0] if snap.job else ""
    shrinks = stop_shrinks(snap, fleet)
    if not job and not shrinks:
        return None
    lines = [f"Stop instance {snap.instance_id} ({snap.gpu_name}, m:{snap.machine_id})?", ""]
    if job:
        lines.append(
            f"Its job {job} is running: the stop interrupts it, and the job is queued again "
            "(or fails, out of retries)."
        )
    if shrinks:
        lines.append(
            f"It is in service: the wanted fleet goes {fleet} -> {fleet - 1}, so it is not "
            "replaced (+ raises it again; a start of it does too)."
        )
    lines.append("Its disk stays and bills storage until it is destroyed.")
    choices = (CANCEL, Choice("stop", "Stop it", "warning"))
    return ChoiceScreen("stop", "\n".join(lines), choices, "cancel")


def hand_over_choice(snap: InstanceSnap, policy: str) -> ChoiceScreen:
    """Handing an observed instance over lets automation stop or destroy what rentwatch did not
    create: it asks first, saying so, with Cancel focused."""
    text = (
        f"Hand instance {snap.instance_id} ({snap.gpu_name}) over to automation? "
        "rentwatch did not create it.\n\n"
        f"From now the campaign's rules (policy {policy}) apply to it, its deadlines "
        "counted from now: a compute preflight over SSH with rentwatch's key, the watchdog and "
        "jobs; automation may stop it, or destroy it while it has not verified (a frozen or "
        "fatal status, a missed boot deadline, a failed preflight), and stops or destroys it "
        "when the campaign ends. Recorded in the ledger as your act.\n"
        "Cancel: it stays observed, untouched."
    )
    choices = (CANCEL, Choice("hand_over", "Hand over", "warning"))
    return ChoiceScreen("hand_over", text, choices, "cancel")


class BulkDestroyConfirm(TypedConfirm):
    """Destroy every stopped rental that never verified or went offline: the list is shown
    first, and one typed confirmation (`destroy N`, N the count shown) covers exactly it."""

    def __init__(self, doomed: tuple[InstanceSnap, ...]) -> None:
        self.doomed = doomed
        phrase = f"destroy {len(doomed)}"
        body = Text()
        body.append(f"Destroy these {len(doomed)} stopped rental(s)?\n\n", style="bold red")
        for s in doomed[:15]:
            why = "went offline" if s.status == "offline" else "never verified"
            body.append(f"  i:{s.instance_id}  ")
            body.append(Text(f"{s.gpu_name} m:{s.machine_id}  {why}  billed ${s.billed_usd:.4f}\n"))
        if len(doomed) > 15:
            body.append(f"  … and {len(doomed) - 15} more\n")
        body.append("\nTheir disks are lost; storage stops billing. It cannot be undone.\n")
        body.append(f"Type '{phrase}' and press Enter.")
        super().__init__(phrase, body, "Destroy all listed", "nothing destroyed")

    def matches(self, typed: str) -> bool:
        return " ".join(typed.split()).lower() == self.phrase


def help_table(lines: list[KeyLine], own: list[KeyLine]) -> tuple[Table, str]:
    """The help: the keys of the screen it was opened on, then the app's, then its own; as a
    grid (a long line wraps in its column) and as plain text."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(no_wrap=True, style="bold cyan", max_width=18)
    grid.add_column(ratio=1)
    plain = ["rentwatch keys"]
    grid.add_row(Text("rentwatch keys", style="bold"), "")
    sections = (
        ("on this screen", [k for k in lines if not k.everywhere]),
        ("everywhere", [k for k in lines if k.everywhere]),
        ("in this help", own),
    )
    for title, keys in sections:
        if not keys:
            continue
        grid.add_row("", "")
        grid.add_row(Text(title, style="bold"), "")
        plain.append(title)
        for k in keys:
            shown = " ".join(k.keys)
            grid.add_row(Text(shown), Text(k.text))
            plain.append(f"  {shown}  {k.text}")
    return grid, "\n".join(plain)


class HelpScreen(ModalScreen[None]):
    """The keys of the screen it opened over (`lines`, read from the bindings: keys.py)."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close", tooltip="Close this help")]

    def __init__(self, lines: list[KeyLine]) -> None:
        super().__init__()
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):  # scrolls from the keyboard on a small terminal
            yield Static(id="help")

    def on_mount(self) -> None:
        own = [k for k in key_lines(self) if k.node is self]
        grid, self.text = help_table(self.lines, own)
        self.query_one("#help", Static).update(grid)

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
