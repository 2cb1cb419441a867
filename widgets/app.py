"""The dashboard app: the fleet screen first, the engine's snapshots routed to it as messages,
and the keys that apply on every screen (quit, help, the ledger, the receipt, the jobs, detach,
the end). Each screen owns its own keys; the help and the command palette read them all."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rentwatch.core.text import clean
from rentwatch.ledger import Ledger
from rentwatch.views.port import EnginePort, LedgerPort
from rentwatch.views.snapshot import FleetReadout
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from .fleet_screen import FleetScreen
from .jobs_screen import JobOutputScreen, JobsScreen
from .keys import key_lines
from .ledger_screen import LedgerScreen
from .messages import EngineFailed, FleetSnapshot
from .modals import HelpScreen, detach_choice, ended_choice, quit_choice
from .operator import Operator
from .receipt_screen import ReceiptScreen

# what asks the controller: once it has ended (its socket gone) none of these can work
NEEDS_CONTROLLER = frozenset({"end_campaign", "jobs", "ledger", "receipt"})
# Textual's palette entries that our own keys answer (q, ?): left out of the palette
OURS = frozenset({"Quit", "Keys"})
ALWAYS = frozenset({"quit_ask", "help"})  # in the palette on every screen


class RentwatchApp(App[str]):
    CSS_PATH = "app.tcss"
    TITLE = "rentwatch"
    # Quit, Help and End lead the footer (footer.py), before the screen's own keys
    BINDINGS = [
        Binding("q", "quit_ask", "Quit", tooltip="Quit (asks)", id="app.quit"),
        Binding("question_mark", "help", "Help", tooltip="Help: the keys", id="app.help"),
        Binding("l", "ledger", "Ledger", tooltip="Ledger (SQL)", id="app.ledger"),
        Binding("r", "receipt", "Receipt", tooltip="Receipt and hosts", id="app.receipt"),
        Binding(
            "j",
            "jobs",
            "Jobs",
            tooltip="Jobs: state, host, progress, ETA, dollars; Enter follows one's output",
            id="app.jobs",
        ),
        Binding(
            "x",
            "detach",
            "Detach",
            tooltip="Detach: the controller runs on (in-process: detach the fleet; asks)",
            id="app.detach",
        ),
        Binding(
            "E",
            "end_campaign",
            "End",
            tooltip="End the campaign and destroy everything it holds (asks: type its name)",
            id="app.end",
        ),
    ]

    def __init__(
        self,
        engine: EnginePort,
        ledger: Ledger | LedgerPort,
        refresh_s: float = 0.5,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.ledger = ledger
        self.latest: FleetReadout | None = None  # the last snapshot heard
        self.notice: str | None = None  # said once the dashboard is up (a toast)
        self.operator = Operator(self, engine, ledger, lambda: self.latest)
        self.fleet = FleetScreen(engine, self.operator, refresh_s)
        # posted from the engine's thread (thread-safe), heard in order; the app forwards
        engine.on_snapshot = lambda snap: self.post_message(FleetSnapshot(snap))
        engine.on_error = lambda msg: self.post_message(EngineFailed(msg))

    def get_default_screen(self) -> Screen[Any]:
        return self.fleet

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Textual's own that have no key of ours (its theme, screenshot), then every key the
        screen answers now, by its title: its "Quit" and "Keys" stood beside our "Quit (asks)"
        and "Help: the keys", two entries for one act."""
        yield from (c for c in super().get_system_commands(screen) if c.title not in OURS)
        offered: set[str] = set()
        for k in key_lines(screen, grouped=False):
            if k.action == "command_palette":
                continue
            offered.add(k.action)
            yield SystemCommand(
                k.text,
                f"key: {' '.join(k.keys)}",
                lambda k=k: self.run_action(k.action, k.node),
            )
        # where a text box takes q and ? as text (the ledger's SQL), the palette still has them
        for b in self.BINDINGS:
            if isinstance(b, Binding) and b.action in ALWAYS and b.action not in offered:
                yield SystemCommand(
                    b.tooltip or b.description,
                    f"key: {self.get_key_display(b)}",
                    lambda b=b: self.run_action(b.action),
                )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not (action in NEEDS_CONTROLLER and self.operator.controller_ended() is not None)

    def on_mount(self) -> None:
        self.engine.start()
        if self.notice:
            self.notify(self.notice, timeout=20)

    def on_fleet_snapshot(self, message: FleetSnapshot) -> None:
        self.latest = message.readout
        self.fleet.post_message(FleetSnapshot(message.readout))

    def on_engine_failed(self, message: EngineFailed) -> None:
        """An engine failure stays on screen: in the fleet's bar until a snapshot says
        otherwise, not only in a toast that fades."""
        text = clean(message.text, 300)
        if text.startswith("reconnected"):  # good news: the next snapshot redraws the bar
            self.notify(text, timeout=10)
            return
        gone = self.operator.controller_ended()
        self.notify(text, severity="warning" if gone else "error", timeout=30)
        self.fleet.show_failure(text, gone, self.latest)
        if gone is not None:
            self.refresh_bindings()  # what acted through it is offered no more

    # -- the other screens -------------------------------------------------------------------
    def action_ledger(self) -> None:
        if not isinstance(self.screen, LedgerScreen):
            self.push_screen(LedgerScreen(self.ledger))

    def action_jobs(self) -> None:
        if isinstance(self.screen, JobOutputScreen):  # a job's output lies over the jobs screen
            self.pop_screen()
        elif not isinstance(self.screen, JobsScreen):
            self.push_screen(JobsScreen(self.engine))

    def action_receipt(self) -> None:
        chart = self.latest.campaign if self.latest else None
        self.push_screen(ReceiptScreen(self.ledger, chart=chart))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(key_lines(self.screen)))

    def action_end_campaign(self) -> None:
        """End the campaign and destroy everything it holds: what it holds is read from the
        ledger first, then listed in the dialog, confirmed by its name."""
        if self.latest is not None:
            self.operator.read_holdings(self.latest.campaign)

    # -- leaving -----------------------------------------------------------------------------
    def _outlives(self) -> bool:
        """Whether the controller goes on when this dashboard quits (a process of its own)."""
        return self.engine.outlives_dashboard

    def _ask_quit(self, focus: str) -> None:
        def chosen(mode: str | None) -> None:
            if mode is not None:
                self._leave(mode)

        snap = self.latest
        campaign = snap.campaign if snap else None
        gone = self.operator.controller_ended()
        if gone is not None:
            hint = self.engine.end_hint or (snap.end_command if snap else "")
            built_in = snap.market_built_in if snap else False
            self.push_screen(ended_choice(gone, campaign, hint, built_in), chosen)
            return
        held, stopped = (snap.held, snap.stopped) if snap else (0, 0)
        dph, end = (snap.dph_now, snap.end_command) if snap else (0.0, "")
        built_in = snap.market_built_in if snap else False
        self.push_screen(
            quit_choice(held, stopped, campaign, self._outlives(), focus, dph, end, built_in),
            chosen,
        )

    def action_detach(self) -> None:
        if self._outlives():  # leaving the controller running is safe: asked, Leave focused
            self._ask_quit("leave")
            return

        def chosen(mode: str | None) -> None:
            if mode == "detach":
                self._leave("detach")

        snap = self.latest
        self.push_screen(
            detach_choice(snap.held if snap else 0, snap.stopped if snap else 0), chosen
        )

    def action_quit_ask(self) -> None:
        self._ask_quit("stop")

    async def action_quit(self) -> None:
        """Textual's own quit (ctrl+q, the palette's "Quit") asks the same question as q: it
        ended the dashboard at once, leaving or stopping the campaign without a word."""
        if getattr(self.screen, "purpose", None) != "quit":  # not a second dialog over the first
            self.action_quit_ask()

    def _leave(self, mode: str) -> None:
        doing = {
            "stop": "stopping everything held…",
            "leave": "leaving the controller running…",
            "detach": "detaching (recorded)…",
            "ended": "quitting: the controller has ended…",
        }
        self.notify(doing.get(mode, mode), timeout=30)
        self._release_and_exit(mode)

    @work(thread=True, exclusive=True, group="shutdown")
    def _release_and_exit(self, mode: str) -> None:
        self.engine.shutdown(mode)
        self.call_from_thread(self.exit, mode)
