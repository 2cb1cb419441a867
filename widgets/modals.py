"""Confirmations: destroy (type the id), the quit and detach choices, and help."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rentwatch.views.snapshot import InstanceSnap
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static


class TypedConfirm(ModalScreen[Any]):
    """An act confirmed by typing it out. Focus starts in the box, as the prompt says; Enter on
    an empty box, Escape or Cancel do nothing (dismissed with `nothing`); a wrong text is
    cleared and said. A subclass says what is shown, what confirms it and what it answers."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    act = ("confirm", "Confirm")  # the act button's id and label
    nothing: Any = None  # what a cancel answers
    scroll = False  # a long body scrolls

    def body(self) -> Text:
        raise NotImplementedError

    def placeholder(self) -> str:
        raise NotImplementedError

    def confirmed(self, typed: str) -> Any:
        """What to answer when `typed` confirms the act; None when it does not."""
        raise NotImplementedError

    def wrong(self, typed: str) -> str:
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        with (VerticalScroll if self.scroll else Vertical)(id="dialog"):
            yield Static(self.body())
            yield Input(placeholder=self.placeholder(), id="typed")
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel", variant="primary")
                yield Button(self.act[1], id=self.act[0], variant="error")

    def on_mount(self) -> None:
        self.query_one("#typed", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if not event.value.strip():
            self.dismiss(self.nothing)  # Enter with nothing typed is a cancel
            return
        self._try(event.value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == self.act[0]:
            self._try(self.query_one("#typed", Input).value)
        else:
            self.dismiss(self.nothing)

    def _try(self, typed: str) -> None:
        answer = self.confirmed(typed)
        if answer is not None:
            self.dismiss(answer)
            return
        self.query_one("#typed", Input).value = ""
        self.notify(self.wrong(typed), severity="warning")

    def action_cancel(self) -> None:
        self.dismiss(self.nothing)


class DestroyConfirm(TypedConfirm):
    """Destroying loses the disk and any unfinished work: the operator types the instance id;
    answered with what was typed."""

    act = ("destroy", "Destroy")

    def __init__(self, snap: InstanceSnap) -> None:
        super().__init__()
        self.snap = snap

    def body(self) -> Text:
        s = self.snap
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
        return body

    def placeholder(self) -> str:
        return f"type {self.snap.instance_id} to confirm"

    def confirmed(self, typed: str) -> str | None:
        return typed.strip() if typed.strip() == str(self.snap.instance_id) else None

    def wrong(self, typed: str) -> str:
        shown = Text(typed.strip()[:20]).plain.encode("ascii", "replace").decode()
        return (
            f"{shown!r} is not {self.snap.instance_id}: nothing destroyed. "
            f"Type {self.snap.instance_id} exactly, or Escape to cancel."
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


def billing_note(campaign: str | None, dph: float, held: int, stopped: int) -> str:
    """What keeps billing after this dialog, and how to end it: a stop leaves a disk billing
    storage, so neither "stop" nor "leave" ends the bill; only a destroy does."""
    if not held and not stopped:
        return ""
    name = campaign or "NAME"
    return (
        f"\n\nBilling now: ${dph:.3f}/h. Stopped rentals, and the verified ones a stop "
        "keeps, bill storage until they are destroyed. To leave nothing billing: Cancel, "
        f"then E (end the campaign and destroy everything), or `rentwatch end --campaign "
        f"{name} --destroy` later."
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

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "cancel" else event.button.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


def quit_choice(
    held: int,
    stopped: int = 0,
    campaign: str | None = None,
    outlives: bool = False,
    focus: str = "stop",
    dph: float = 0.0,
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
            + billing_note(campaign, dph, held, stopped)
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
            + billing_note(campaign, dph, held, stopped)
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


def stop_shrinks(snap: InstanceSnap, fleet: int) -> bool:
    """Whether the engine lowers the wanted fleet for this stop (engine/operator.py: a stop of
    a verified, supervised instance, so that no poll replaces it)."""
    in_service = snap.phase in ("verified", "working", "idle") and snap.passed_preflight
    return snap.supervised and in_service and fleet > 0


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
    first, and one typed confirmation (`destroy N`, N the count shown) covers exactly it;
    answered True, or False for nothing."""

    act = ("destroy", "Destroy all listed")
    nothing = False

    def __init__(self, doomed: tuple[InstanceSnap, ...]) -> None:
        super().__init__()
        self.doomed = doomed

    @property
    def phrase(self) -> str:
        return f"destroy {len(self.doomed)}"

    def body(self) -> Text:
        body = Text()
        body.append(f"Destroy these {len(self.doomed)} stopped rental(s)?\n\n", style="bold red")
        for s in self.doomed[:15]:
            why = "went offline" if s.status == "offline" else "never verified"
            body.append(f"  i:{s.instance_id}  ")
            body.append(Text(f"{s.gpu_name} m:{s.machine_id}  {why}  billed ${s.billed_usd:.4f}\n"))
        if len(self.doomed) > 15:
            body.append(f"  … and {len(self.doomed) - 15} more\n")
        body.append("\nTheir disks are lost; storage stops billing. It cannot be undone.\n")
        body.append(f"Type '{self.phrase}' and press Enter.")
        return body

    def placeholder(self) -> str:
        return self.phrase

    def confirmed(self, typed: str) -> bool | None:
        return True if " ".join(typed.split()).lower() == self.phrase else None

    def wrong(self, typed: str) -> str:
        return f"that is not '{self.phrase}': nothing destroyed. Type it exactly, or Escape."


HELP = """\
rentwatch keys

  ↑/↓       select an instance           t    table view / pane view
  Enter     detail of the selected one   /    filter the fleet
  s         stop the selected instance   a    start it again
  d         destroy (asks: type its id)  c    create one more
  D         destroy stopped duds (asks)  + -  want one more / fewer
  l         ledger (SQL)                 r    receipt and hosts
  j         the jobs; Enter on one follows its output live
  o         sort: new / billed / state / age / $/h
  E         end the campaign, destroying all it holds (asks its name)
  x         leave it running (asks)
  q         quit (asks: stop the campaign / leave it running / cancel)
  ctrl+p    every action, by name        ?    this help

on the detail screen (Enter)
  g         fetch the market's logs again   Esc  back

in the ledger (l)
  ctrl+r    run the query                ctrl+a   select all of it
  F2..F6    canned: receipt, duds, dud cost, a machine, throttled
  ctrl+n/b  next / previous page         ctrl+e   export CSV / Parquet
  Esc       cancel a running query, or back

on every screen: ↑/↓ PgUp/PgDn scroll
"""


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):  # scrolls from the keyboard on a small terminal
            yield Static(HELP)

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
