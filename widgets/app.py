"""The dashboard: fleet panes (or table), the campaign bar, the decision log, and the operator's
keys. Widgets render snapshots; intents go to the engine thread; nothing here calls the market."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Collection, Iterable
from typing import Any

from rentwatch.core.text import clean
from rentwatch.engine.intents import (
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    EndIntent,
    FleetSizeIntent,
    HandOverIntent,
    Intent,
    Reply,
    StartIntent,
    StopIntent,
)
from rentwatch.ledger import Ledger
from rentwatch.ledger.holdings import Holding, read_holdings
from rentwatch.views.port import EnginePort, LedgerPort
from rentwatch.views.snapshot import FleetReadout, InstanceSnap
from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Input, RichLog, Static

from .detail_screen import DetailScreen
from .end_dialog import EndConfirm
from .fleet import PANE_HEIGHT, SORT_NAMES, FleetTable, FleetView, column_sort, sort_label, visible
from .footer import FittedFooter
from .header import fleet_fields, wrap_fields
from .jobs_screen import JobOutputScreen, JobsScreen
from .ledger_screen import CANNED, LedgerScreen
from .modals import (
    BulkDestroyConfirm,
    DestroyConfirm,
    HelpScreen,
    detach_choice,
    ended_choice,
    hand_over_choice,
    quit_choice,
    stop_choice,
)
from .receipt_screen import ReceiptScreen
from .render import campaign_fields, engine_failed


class FilterInput(Input):
    """The fleet filter's box: Enter applies what is typed, Escape closes it unchanged."""

    BINDINGS = [Binding("escape", "close", "Close filter", id="filter.close")]

    def action_close(self) -> None:
        view = self.app.query_one(FleetView)
        self.value = view.filter  # what was typed and not applied is dropped
        self.remove_class("visible")
        view.focus()


# keys that act on the fleet view itself: off on other screens, where they would change a
# view the operator cannot see (and `/` would move the focus behind the screen)
FLEET_ONLY = frozenset({"toggle_view", "filter", "sort", "sort_column"})
# act on the selected instance: only where it is in sight (the fleet, or its own detail
# screen); on the receipt or the ledger `d` asked to destroy an instance the operator could
# not see
ON_AN_INSTANCE = frozenset({"stop", "destroy", "start", "hand_over", "detail"})
# what would set automation going again: a campaign that has ended refuses these (stop, start,
# destroy and the end itself still act on what it holds), so they are not offered then
NOT_AFTER_END = frozenset({"create", "fleet_more", "fleet_less", "hand_over"})
# what asks the controller: once it has ended (its socket gone) none of these can work, so a
# dashboard that outlived it offers only what it shows itself, and quitting
NEEDS_CONTROLLER = frozenset(
    {
        "stop", "destroy", "start", "hand_over", "detail", "bulk_destroy", "end_campaign",
        "create", "fleet_more", "fleet_less", "jobs", "ledger", "receipt",
    }
)  # fmt: skip
# what `a` may start: a rental not running (lifecycle: only a stopped one boots again)
STARTABLE = frozenset({"stopped", "outbid"})


def left_after_end(listed: Iterable[Holding], destroyed: Collection[int]) -> tuple[int, ...]:
    """The listed rentals an end's reply does not say it destroyed."""
    return tuple(h.instance_id for h in listed if h.instance_id not in destroyed)


class RentwatchApp(App[str]):
    CSS_PATH = "app.tcss"
    TITLE = "rentwatch"
    # Quit and Help first, then what acts on the selected instance, the ledger and the receipt:
    # the footer shows the keys that fit whole, in this order (at 80 columns through Receipt);
    # the rest, the fleet size keys and the bulk destroy are in the help (?) and the palette.
    # Each key is written once: the command palette lists these (the tooltip is its title)
    BINDINGS = [
        Binding("q", "quit_ask", "Quit", tooltip="Quit (asks)", id="app.quit"),
        Binding("question_mark", "help", "Help", tooltip="Help: the keys", id="app.help"),
        Binding(
            "enter",
            "detail",
            "Detail",
            tooltip="Detail of the selected instance",
            id="fleet.detail",
        ),
        Binding("s", "stop", "Stop", tooltip="Stop the selected instance", id="fleet.stop"),
        Binding(
            "d",
            "destroy",
            "Destroy",
            tooltip="Destroy the selected instance (asks)",
            id="fleet.destroy",
        ),
        Binding("a", "start", "Start", tooltip="Start the selected instance", id="fleet.start"),
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
            tooltip="Leave: the controller runs on (in-process: detach the fleet; asks)",
            id="app.detach",
        ),
        Binding("c", "create", "Create", tooltip="Create one more instance", id="fleet.create"),
        Binding("t", "toggle_view", "Table", tooltip="Toggle table / pane view", id="fleet.toggle"),
        Binding("slash", "filter", "Filter", tooltip="Filter the fleet", id="fleet.filter"),
        Binding(
            "o",
            "sort",
            "Sort",
            tooltip="Sort the fleet: cycle new / billed / state / age / $/h",
            id="fleet.sort",
        ),
        # a key per table column, as the header's click: 1 id ... 9 status; again reverses
        *(
            Binding(
                str(i + 1),
                f"sort_column({i})",
                f"Sort by {c}",
                tooltip=f"Sort the fleet by its {c} column (again: the other way)",
                id=f"fleet.sort_{i + 1}",
                show=False,
            )
            for i, c in enumerate(FleetTable.COLUMNS)
        ),
        Binding(
            "plus",
            "fleet_more",
            "Fleet+",
            tooltip="Want one more verified instance (fleet +1)",
            id="fleet.more",
            show=False,
        ),
        Binding(
            "minus",
            "fleet_less",
            "Fleet-",
            tooltip="Want one fewer verified instance (fleet -1)",
            id="fleet.less",
            show=False,
        ),
        Binding(
            "D",
            "bulk_destroy",
            "Destroy duds",
            tooltip="Destroy stopped rentals that never verified or went offline (asks)",
            id="fleet.bulk_destroy",
            show=False,
        ),
        Binding(
            "E",
            "end_campaign",
            "End campaign",
            tooltip="End the campaign and destroy everything it holds (asks: type its name)",
            id="app.end",
            show=False,
        ),
        Binding(
            "H",
            "hand_over",
            "Hand over",
            tooltip="Hand the selected instance over to automation (recorded)",
            id="fleet.hand_over",
            show=False,
        ),
    ]
    # the command palette's entries: each binding's title and action, written once above
    PALETTE = tuple((b.tooltip or b.description, b.action) for b in BINDINGS)

    def __init__(
        self,
        engine: EnginePort,  # in-process, or a controller's over its socket
        ledger: Ledger | LedgerPort,
        refresh_s: float = 0.5,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.ledger = ledger
        self.refresh_s = refresh_s
        self.latest: FleetReadout | None = None
        self._shown: FleetReadout | None = None
        self._log_seen = 0
        self._bar_height = 0
        self.table_mode = False
        self.notice: str | None = None  # said once the dashboard is up (a toast)
        self._ui_thread = threading.get_ident()
        engine.on_snapshot = self._receive  # called in the engine's thread: only stores
        engine.on_error = lambda msg: self.call_from_thread(self._engine_error, msg)

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if isinstance(screen, LedgerScreen):  # its canned queries, without a chord to learn
            for key, (name, _) in CANNED.items():
                yield SystemCommand(
                    f"Ledger query: {name}",
                    f"rentwatch: canned ledger query {key}",
                    lambda key=key: screen.action_canned(key),  # type: ignore[misc]
                )
        if isinstance(screen, DetailScreen):
            yield SystemCommand(
                "Fetch this instance's market logs again",
                "rentwatch: the market's logs call, through the engine",
                screen.action_fetch_logs,
            )
        for title, action in self.PALETTE:
            if not self._offered(action, screen):
                continue
            name = action.split("(")[0].replace("_", " ")
            yield SystemCommand(
                title,
                f"rentwatch: {name}",
                lambda action=action: self.run_action(action),  # type: ignore[misc]
            )

    def _on_fleet(self, screen: Screen[Any]) -> bool:
        return screen is self.screen_stack[0]

    def _instance_in_sight(self, screen: Screen[Any]) -> bool:
        return self._on_fleet(screen) or isinstance(screen, DetailScreen)

    def _ended(self) -> bool:
        return self.latest is not None and self.latest.finished is not None

    def _controller_ended(self) -> str | None:
        """Why the controller this dashboard is attached to ended on its own (None: it
        serves, or the engine runs in this process)."""
        gone = getattr(self.engine, "ended", None)
        return gone if isinstance(gone, str) else None

    def _offered(self, action: str, screen: Screen[Any]) -> bool:
        action = action.split("(")[0]  # sort_column(3): the action's name
        if action in FLEET_ONLY and not self._on_fleet(screen):
            return False
        if action in ON_AN_INSTANCE and not self._instance_in_sight(screen):
            return False
        if action in NEEDS_CONTROLLER and self._controller_ended() is not None:
            return False
        return not (action in NOT_AFTER_END and self._ended())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self._offered(action, self.screen)

    def _receive(self, snap: FleetReadout) -> None:
        self.latest = snap

    def _engine_error(self, msg: str) -> None:
        """An engine failure stays on screen: in the bar until a snapshot says otherwise (a
        snapshot carries its own `engine_error`), not only in a toast that fades."""
        text = clean(msg, 300)
        if text.startswith("reconnected"):  # good news: the next snapshot redraws the bar
            self.notify(text, timeout=10)
            return
        gone = self._controller_ended()
        self.notify(text, severity="warning" if gone else "error", timeout=30)
        # a snapshot that arrived before this must not be drawn over it at the next refresh
        self._shown = self.latest
        if gone is not None:  # it ended on its own and said why: no failure of this screen's
            bar = Text(" CONTROLLER ENDED ", style="bold reverse yellow")
            bar.append(f" {clean(gone, 300)}  (q quits)", style="bold yellow")
            self.query_one("#bar", Static).update(bar)
            self.refresh_bindings()  # what acted through it is offered no more
        elif self.latest is None or self.latest.engine_error is None:
            bar = Text(" ENGINE FAILED ", style="bold reverse red")
            bar.append(f" {text}  (q quits)", style="bold red")
            self.query_one("#bar", Static).update(bar)

    def compose(self) -> ComposeResult:
        yield Static(Text(" starting the engine…"), id="bar")
        yield FilterInput(
            placeholder="filter: id, GPU, phase or machine (Enter on empty clears it)", id="filter"
        )
        yield FleetView(id="fleet")
        yield FleetTable(id="table")
        # wrapped: a decision's reason ends with its why, which a cut line lost
        yield RichLog(
            id="log", markup=False, highlight=False, wrap=True, min_width=20, max_lines=500
        )
        yield FittedFooter(compact=True)

    def on_mount(self) -> None:
        self.engine.start()
        self.set_interval(self.refresh_s, self.render_latest)
        self.query_one(FleetView).focus()
        if self.notice:
            self.notify(self.notice, timeout=20)

    def render_latest(self) -> None:
        snap = self.latest
        if snap is None or snap is self._shown or len(self.screen_stack) > 1:
            return  # nothing new, or a modal/screen is on top: don't render under it
        if (snap.finished is None) != (self._shown is None or self._shown.finished is None):
            self.refresh_bindings()  # an ended campaign's footer offers what still acts
        self._shown = snap
        try:
            self._render(snap)
        except NoMatches:  # the app is closing: its widgets go before its timers stop
            return

    def _render(self, snap: FleetReadout) -> None:
        view = self.query_one(FleetView)
        bar = self.query_one("#bar", Static)
        # wrapped here a field at a time, never inside one; a new layout (the whole screen's,
        # costly at 10,000 instances) only when the bar's line count changes
        width = max(20, bar.size.width or self.size.width)
        failed = engine_failed(snap)
        cells = 20 if width >= 100 else 10  # the budget bar gives way on a narrow terminal
        first = campaign_fields(snap)
        second = fleet_fields(snap, sort_label(view.sort, view.reverse), view.filter, cells)
        # narrow, the two lines run on as one (80x24 gave the bar five lines of 24)
        parts = [first + second] if width < 100 else [first, second]
        lines = [
            *([failed] if failed is not None else []),
            *(line for part in parts for line in wrap_fields(part, width)),
        ]
        text = Text("\n").join(lines)
        height = len(lines)
        bar.update(text, layout=height != self._bar_height)
        self._bar_height = height
        if self.table_mode:
            shown = visible(snap.instances, snap.now, view.filter, view.sort, view.reverse)
            table = self.query_one(FleetTable)
            table.show_sort(view.sort, view.reverse)
            table.show(shown)
            rows = len(shown) + 1  # the header
        else:
            view.show(snap.instances, snap.now)
            rows = len(view.snaps) * PANE_HEIGHT
        self._fit_log(height, rows)
        log = self.query_one("#log", RichLog)
        fresh = min(len(snap.decisions), snap.decisions_total - self._log_seen)
        for line in snap.decisions[len(snap.decisions) - fresh :] if fresh > 0 else ():
            log.write(Text(clean(line, 400)))
        self._log_seen = snap.decisions_total

    def _fit_log(self, bar: int, fleet_rows: int) -> None:
        """The decision log takes what the fleet does not need (at 200x50 half the screen was
        empty under a few panes), never less than a few lines, never more than half."""
        free = self.size.height - bar - 1  # the footer's line
        least = 6 if self.size.height < 30 else 9
        want = max(least, min(free // 2, free - fleet_rows - 2))  # 2: the fleet's border
        log = self.query_one("#log", RichLog)
        if log.styles.height is None or log.styles.height.value != want:
            log.styles.height = want

    # -- selection ---------------------------------------------------------------------------
    def selected(self) -> InstanceSnap | None:
        if isinstance(self.screen, DetailScreen):  # the one shown, whatever the fleet's cursor
            iid: int | None = self.screen.instance_id
        elif self.table_mode:
            iid = self.query_one(FleetTable).selected_id
        else:
            iid = self.query_one(FleetView).selected_id
        snap = self.latest
        if snap is None or iid is None:
            return None
        return next((s for s in snap.instances if s.instance_id == iid), None)

    def _send(self, done_text: str, intent: Intent, failed_text: str) -> None:
        """Submit `intent`; say `done_text` when it took, `failed_text: why` when it did not."""
        fut = self.engine.submit(intent)

        def done(f: concurrent.futures.Future[Any]) -> None:
            exc = f.exception()
            reply: Reply | None = None if exc is not None else f.result()
            if reply is not None and reply.done:
                self._tell(done_text, "information")
            else:
                why = exc if reply is None else reply.message
                self._tell(clean(f"{failed_text}: {why}", 300), "error")

        fut.add_done_callback(done)

    def _tell(self, text: str, severity: str, timeout: float = 5) -> None:
        """A toast from whichever thread an answer arrives on."""
        if threading.get_ident() == self._ui_thread:  # answered at once (no engine running)
            self.notify(text, severity=severity, timeout=timeout)  # type: ignore[arg-type]
        else:  # answered on the engine's thread, or the controller client's
            self.call_from_thread(self.notify, text, severity=severity, timeout=timeout)

    # -- intents -----------------------------------------------------------------------------
    def _gone(self, s: InstanceSnap) -> bool:
        """Whether it no longer exists on the market: no key may act on it (say so)."""
        if s.phase in ("destroyed", "lost"):
            self.notify(f"{s.instance_id} is already gone ({s.phase})", severity="warning")
            return True
        return False

    def action_stop(self) -> None:
        """A stop that interrupts a job or lowers the wanted fleet asks first, saying so (the
        instance is the one shown when the key was pressed, whatever moves meanwhile)."""
        s = self.selected()
        snap = self.latest
        if s is None or snap is None or self._gone(s):
            return
        if s.phase == "stopped":  # `s` said "stopped" and nothing happened: say so instead
            self.notify(f"{s.instance_id} is stopped already: nothing to stop", severity="warning")
            return

        def stop(choice: str | None = "stop") -> None:
            if choice != "stop":
                self.notify(f"stop cancelled: {s.instance_id} left as it is")
                return
            self._send(
                f"stopped {s.instance_id}",
                StopIntent(s.instance_id),
                f"could not stop {s.instance_id}",
            )

        question = stop_choice(s, snap.fleet)
        if question is None:
            stop()
        else:
            self.push_screen(question, stop)

    def action_start(self) -> None:
        """A start of a stopped rental (or one an outbid paused). On one that runs, `a` said
        "started" while the engine wrote an illegal move into the ledger: it says so instead."""
        s = self.selected()
        if s is None or self._gone(s):
            return
        if s.phase not in STARTABLE:
            self.notify(
                f"{s.instance_id} is {s.phase}: nothing to start (a starts a stopped rental)",
                severity="warning",
            )
            return
        self._send(
            f"started {s.instance_id}",
            StartIntent(s.instance_id),
            f"could not start {s.instance_id}",
        )

    def _resize(self, delta: int) -> None:
        snap = self.latest
        if snap is None:
            return
        size = max(0, snap.fleet + delta)
        if size == snap.fleet:  # `-` at 0: nothing to ask the controller, nothing to record
            self.notify(f"the wanted fleet is {size} already", severity="warning")
            return
        self._send(
            f"wanted fleet {snap.fleet} -> {size}",
            FleetSizeIntent(size),
            f"could not set the wanted fleet to {size}",
        )

    def action_fleet_more(self) -> None:
        self._resize(+1)

    def action_fleet_less(self) -> None:
        self._resize(-1)

    def action_hand_over(self) -> None:
        s = self.selected()
        snap = self.latest
        if s is None or s.supervised or snap is None or self._gone(s):
            return

        def chosen(choice: str | None) -> None:
            if choice != "hand_over":
                self.notify(f"hand-over cancelled: {s.instance_id} stays observed")
                return
            self._send(
                f"handed {s.instance_id} over to automation",
                HandOverIntent(s.instance_id),
                f"could not hand {s.instance_id} over",
            )

        self.push_screen(hand_over_choice(s, snap.policy), chosen)

    def action_create(self) -> None:
        self._send(
            "asked the market for one more instance",
            CreateIntent(),
            "could not create one more instance",
        )

    def action_destroy(self) -> None:
        s = self.selected()
        if s is None or self._gone(s):
            return

        def confirmed(typed: str | None) -> None:
            if typed is None:
                self.notify("destroy cancelled: nothing destroyed")
                return
            conf = DestroyConfirmation(s.instance_id, typed)
            self._send(
                f"destroyed {s.instance_id}",
                DestroyIntent(conf),
                f"could not destroy {s.instance_id}",
            )

        self.push_screen(DestroyConfirm(s), confirmed)

    def action_detail(self) -> None:
        s = self.selected()
        if s is not None:
            self.push_screen(DetailScreen(self.engine, s.instance_id))

    def on_data_table_row_selected(self, event: FleetTable.RowSelected) -> None:
        if isinstance(event.data_table, FleetTable):  # Enter on a table row
            self.action_detail()

    def action_sort(self) -> None:
        view = self.query_one(FleetView)
        at = SORT_NAMES.index(view.sort) if view.sort in SORT_NAMES else -1
        self._sort_by(SORT_NAMES[(at + 1) % len(SORT_NAMES)], reverse=False)

    def action_sort_column(self, index: int) -> None:
        """Sort by the table's column `index` (its number key), or the other way if the fleet
        is sorted by it already: as a click on its header does."""
        self._sort_column(FleetTable.COLUMNS[index])

    def on_data_table_header_selected(self, event: FleetTable.HeaderSelected) -> None:
        if isinstance(event.data_table, FleetTable):
            self._sort_column(str(event.column_key.value))

    def _sort_column(self, column: str) -> None:
        view = self.query_one(FleetView)
        sort = column_sort(column)
        self._sort_by(sort, reverse=not view.reverse if view.sort == sort else False)

    def _sort_by(self, sort: str, reverse: bool) -> None:
        view = self.query_one(FleetView)
        view.sort, view.reverse = sort, reverse
        self.notify(f"sorted by {sort_label(sort, reverse)}", timeout=2)
        self._shown = None
        self.render_latest()

    def bulk_candidates(self) -> list[InstanceSnap]:
        return self.latest.bulk_candidates() if self.latest else []

    def action_bulk_destroy(self) -> None:
        doomed = self.bulk_candidates()
        if not doomed:
            self.notify("no stopped rental that never verified or went offline", timeout=4)
            return

        def confirmed(ok: bool | None) -> None:
            if not ok:
                self.notify("bulk destroy cancelled: nothing destroyed")
                return
            # the typed confirmation covered this very list, as it stood: one started (or
            # gone) while the dialog was open is left alone
            still = {s.instance_id for s in self.bulk_candidates()}
            for s in doomed:
                if s.instance_id not in still:
                    self.notify(f"{s.instance_id} changed meanwhile: not destroyed")
                    continue
                conf = DestroyConfirmation(s.instance_id, str(s.instance_id))
                self._send(
                    f"destroyed {s.instance_id}",
                    DestroyIntent(conf),
                    f"could not destroy {s.instance_id}",
                )

        self.push_screen(BulkDestroyConfirm(tuple(doomed)), confirmed)

    def action_end_campaign(self) -> None:
        """End the campaign and destroy everything it holds: what it holds is read from the
        ledger first (a thread worker), then listed in the dialog, confirmed by its name."""
        if self.latest is not None:
            self._read_holdings(self.latest.campaign)

    @work(thread=True, exclusive=True, group="holdings", exit_on_error=False)
    def _read_holdings(self, campaign: str) -> None:
        held: list[Holding] = []
        error = ""
        try:
            held = read_holdings(self.ledger, campaign)
        except Exception as exc:  # said in the dialog: the end still destroys what is held
            error = f"{type(exc).__name__}: {exc}"
        self.call_from_thread(self._ask_end, campaign, held, error)

    def _ask_end(self, campaign: str, held: list[Holding], error: str) -> None:
        def confirmed(typed: str | None) -> None:
            if typed is None:
                self.notify("end cancelled: nothing ended, nothing destroyed")
                return
            self._send_end(campaign, typed, held)

        self.push_screen(EndConfirm(campaign, held, error), confirmed)

    def _send_end(self, campaign: str, typed: str, held: Iterable[Holding] = ()) -> None:
        self.notify(f"ending {campaign}: destroying everything it holds…", timeout=10)
        fut = self.engine.submit(EndIntent(destroy=True, typed=typed))
        listed = tuple(held)

        def done(f: concurrent.futures.Future[Any]) -> None:
            exc = f.exception()
            reply: Reply | None = None if exc is not None else f.result()
            if reply is not None and reply.done:
                text = clean(f"ended {campaign}: {reply.message}", 600)
                rest = left_after_end(listed, reply.destroyed)
                if rest:
                    self._on_ui(self._destroy_rest, campaign, rest)
            else:
                why = exc if reply is None else reply.message
                text = clean(f"could not end {campaign}: {why}", 300)
            self._tell(text, "error" if reply is None or not reply.done else "information", 30)

        fut.add_done_callback(done)

    def _destroy_rest(self, campaign: str, rest: tuple[int, ...]) -> None:
        """What the dialog listed and the end left (a controller from before the engine's
        end went over stopped rentals too: they went on billing storage, "ended demo: it
        held nothing"). The person typed the name over that list: each is destroyed, as the
        person's act."""
        for iid in rest:
            self._send(
                f"destroyed {iid} ({campaign} ended)",
                DestroyIntent(
                    DestroyConfirmation(iid, str(iid)),
                    f"the end of {campaign}: everything it held destroyed, its name typed",
                ),
                f"could not destroy {iid}",
            )

    def _on_ui(self, fn: Any, *args: Any) -> None:
        """Run `fn` on the UI thread, from whichever thread an answer arrives on."""
        if threading.get_ident() == self._ui_thread:
            fn(*args)
        else:
            self.call_from_thread(fn, *args)

    def action_toggle_view(self) -> None:
        """The other view, with the same instance selected."""
        chosen = self.selected()
        self.table_mode = not self.table_mode
        self.query_one(FleetView).display = not self.table_mode
        self.query_one(FleetTable).display = self.table_mode
        self._shown = None
        self.render_latest()
        iid = chosen.instance_id if chosen else None
        (self.query_one(FleetTable) if self.table_mode else self.query_one(FleetView)).select_id(
            iid
        )
        if self.table_mode:
            self.query_one(FleetTable).focus()
        else:
            self.query_one(FleetView).focus()

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.query_one(FleetView).filter = event.value.strip()
            event.input.remove_class("visible")
            self.query_one(FleetView).focus()
            self._shown = None
            self.render_latest()

    def action_ledger(self) -> None:
        self.push_screen(LedgerScreen(self.ledger))

    def action_jobs(self) -> None:
        if not isinstance(self.screen, JobsScreen | JobOutputScreen):
            self.push_screen(JobsScreen(self.engine))

    def action_receipt(self) -> None:
        chart = self.latest.campaign if self.latest else None
        self.push_screen(ReceiptScreen(self.ledger, chart=chart))

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def _held(self) -> int:
        return self.latest.held if self.latest else 0

    def _stopped(self) -> int:
        return self.latest.stopped if self.latest else 0

    def _outlives(self) -> bool:
        """Whether the controller goes on when this dashboard quits (a process of its own)."""
        return bool(getattr(self.engine, "outlives_dashboard", False))

    def _ask_quit(self, focus: str) -> None:
        def chosen(mode: str | None) -> None:
            if mode is not None:
                self._leave(mode)

        campaign = self.latest.campaign if self.latest else None
        dph = self.latest.dph_now if self.latest else 0.0
        end = self.latest.end_command if self.latest else ""
        gone = self._controller_ended()
        if gone is not None:
            hint = getattr(self.engine, "end_hint", "") or end
            self.push_screen(ended_choice(gone, campaign, hint), chosen)
            return
        self.push_screen(
            quit_choice(self._held(), self._stopped(), campaign, self._outlives(), focus, dph, end),
            chosen,
        )

    def action_detach(self) -> None:
        if self._outlives():  # leaving the controller running is safe: asked, Leave focused
            self._ask_quit("leave")
            return

        def chosen(mode: str | None) -> None:
            if mode == "detach":
                self._leave("detach")

        self.push_screen(detach_choice(self._held(), self._stopped()), chosen)

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
