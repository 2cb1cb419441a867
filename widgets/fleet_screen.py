"""The fleet: its panes (or table), the campaign bar, the decision log, and the keys that act on
the fleet or on its selected instance. It draws the snapshots the app forwards to it, at most
one per `refresh_s`, while it is in sight (on top, or under a dialog)."""

from __future__ import annotations

from typing import Any

from rentwatch.core.text import clean
from rentwatch.views.port import EnginePort
from rentwatch.views.snapshot import FleetReadout, InstanceSnap
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.timer import Timer
from textual.widgets import Input, RichLog, Static

from .decision_log import DecisionLog
from .detail_screen import DetailScreen
from .fleet import PANE_HEIGHT, SORT_NAMES, FleetTable, FleetView, column_sort, sort_label, visible
from .footer import FittedFooter
from .header import WIDE, budget_cells, fleet_fields, wrap_fields
from .messages import FleetSnapshot
from .operator import Operator
from .render import campaign_fields, engine_failed

# what acts on the view alone: it still works once the controller has ended
VIEW_ONLY = frozenset({"toggle_view", "filter", "sort", "sort_column"})


SORT_KEYS = Binding.Group(
    "Sort by that column of the table: " + ", ".join(FleetTable.COLUMNS) + " (again: reversed)"
)


FILTER_DEBOUNCE_S = 0.15  # a typist's burst of keys filters the fleet once, not per key


class FilterInput(Input):
    """The fleet filter's box: the fleet is filtered as it is typed; Enter keeps the filter and
    closes the box, Escape puts back the filter it opened on."""

    BINDINGS = [Binding("escape", "close", "Close filter", id="filter.close")]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.before = ""  # the filter when the box opened: what Escape puts back
        self._due: Timer | None = None

    def open(self, current: str) -> None:
        self.before = current
        self.value = current
        self.add_class("visible")

    def on_input_changed(self, event: Input.Changed) -> None:
        if not self.has_class("visible"):
            return  # put back by close(), not typed
        if self._due is not None:
            self._due.stop()
        self._due = self.set_timer(FILTER_DEBOUNCE_S, self._typed)

    def _typed(self) -> None:
        self._due = None
        screen = self.screen
        if isinstance(screen, FleetScreen) and self.has_class("visible"):
            screen.show_filter(self.value)

    def _settle(self) -> None:
        """A filtering still due is dropped: the caller applies the box's value itself."""
        if self._due is not None:
            self._due.stop()
            self._due = None

    async def action_submit(self) -> None:
        """Applied at once, not by a message that waits its turn: a key typed right after
        Enter belongs to the fleet again (it went into the box, or Enter to the fleet)."""
        self._settle()
        screen = self.screen
        if isinstance(screen, FleetScreen):
            screen.apply_filter(self.value)

    def action_close(self) -> None:
        self._settle()
        self.remove_class("visible")
        self.value = self.before
        screen = self.screen
        if isinstance(screen, FleetScreen):
            screen.apply_filter(self.before)


class FleetScreen(Screen[None]):
    # what acts on the selected instance first: the footer shows the keys that fit whole, in
    # this order, after the app's Quit and Help; the rest are in the help (?) and the palette
    BINDINGS = [
        Binding(
            "enter",
            "detail",
            "Detail",
            tooltip="Detail of the selected instance",
            id="fleet.detail",
        ),
        Binding(
            "s", "stop", "Stop", tooltip="Stop the selected instance (may ask)", id="fleet.stop"
        ),
        Binding(
            "d",
            "destroy",
            "Destroy",
            tooltip="Destroy the selected instance (asks)",
            id="fleet.destroy",
        ),
        Binding("a", "start", "Start", tooltip="Start the selected instance", id="fleet.start"),
        Binding("t", "toggle_view", "Table", tooltip="Toggle table / pane view", id="fleet.toggle"),
        Binding("slash", "filter", "Filter", tooltip="Filter the fleet", id="fleet.filter"),
        Binding(
            "o",
            "sort",
            "Sort",
            tooltip="Sort the fleet: cycle " + " / ".join(SORT_NAMES),
            id="fleet.sort",
        ),
        Binding("c", "create", "Create", tooltip="Create one more instance", id="fleet.create"),
        # a key per table column, as the header's click: 1 id ... 9 status; again reverses
        *(
            Binding(
                str(i + 1),
                f"sort_column({i})",
                f"Sort by {c}",
                tooltip=f"Sort the fleet by its {c} column (again: the other way)",
                id=f"fleet.sort_{i + 1}",
                show=False,
                group=SORT_KEYS,
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
            "H",
            "hand_over",
            "Hand over",
            tooltip="Hand the selected instance over to automation (recorded)",
            id="fleet.hand_over",
            show=False,
        ),
    ]

    def __init__(self, engine: EnginePort, operator: Operator, refresh_s: float = 0.5) -> None:
        super().__init__()
        self.engine = engine
        self.operator = operator
        self.refresh_s = refresh_s
        self.latest: FleetReadout | None = None
        self._shown: FleetReadout | None = None
        self._next: Timer | None = None  # armed after a draw: snapshots meanwhile wait for it
        self._held: FleetReadout | None = None  # older than a failure the bar shows: not drawn
        self._log_seen = 0
        self._bar_height = 0
        self.table_mode = False

    def compose(self) -> ComposeResult:
        yield Static(Text(" starting the engine…"), id="bar")
        yield FilterInput(
            placeholder="filter as you type: id, GPU, phase or machine (Enter keeps it, Esc undoes)",
            id="filter",
        )
        yield FleetView(id="fleet")
        yield FleetTable(id="table")
        # wrapped: a decision's reason ends with its why, which a cut line lost
        yield DecisionLog(id="log", min_width=20, max_lines=500)
        yield FittedFooter(compact=True)

    def on_mount(self) -> None:
        self.query_one(FleetView).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in VIEW_ONLY and self.operator.controller_ended() is not None:
            return False  # it asked the controller, whose socket is gone
        return not self.operator.refused_after_end(action)

    def on_key(self, event: events.Key) -> None:
        if self.operator.say_refused(self, event.key):
            event.stop()

    # -- drawing -----------------------------------------------------------------------------
    def on_fleet_snapshot(self, message: FleetSnapshot) -> None:
        ended = self.latest is not None and self.latest.finished is not None
        self.latest = message.readout
        if (self.latest.finished is not None) != ended:
            self.refresh_bindings()  # an ended campaign's footer offers what still acts
        if self._next is None:
            self.render_latest()

    def on_screen_resume(self) -> None:
        self.render_latest()  # what came while a dialog or a screen was on top

    def _in_sight(self) -> bool:
        """This screen is on top, or only dialogs are over it: what is behind a dialog is
        still seen, and a fleet frozen there read as a stalled engine."""
        stack = self.app.screen_stack
        if self not in stack:
            return False
        return all(isinstance(s, ModalScreen) for s in stack[stack.index(self) + 1 :])

    def _due(self) -> None:
        self._next = None
        if self.latest is not self._shown:
            self.render_latest()

    def render_latest(self) -> None:
        snap = self.latest
        if snap is None or snap is self._shown or snap is self._held or not self._in_sight():
            return  # nothing new, or another screen hides this one: drawn when it comes back
        self._shown = snap
        if self._next is not None:
            self._next.stop()
        self._next = self.set_timer(self.refresh_s, self._due)
        try:
            self._draw(snap)
        except NoMatches:  # the app is closing: its widgets go before its timers stop
            return

    def redraw(self) -> None:
        """Draw the latest snapshot again now (a new sort, filter or view)."""
        self._shown = None
        self.render_latest()

    def _draw(self, snap: FleetReadout) -> None:
        view = self.query_one(FleetView)
        bar = self.query_one("#bar", Static)
        # wrapped here a field at a time, never inside one; a new layout (the whole screen's,
        # costly at 10,000 instances) only when the bar's line count changes
        width = max(20, bar.size.width or self.size.width)
        failed = engine_failed(snap)
        first = campaign_fields(snap)
        second = fleet_fields(
            snap, sort_label(view.sort, view.reverse), view.filter, budget_cells(width)
        )
        # under WIDE the two lines run on as one: at 120 the first wrapped, leaving a line
        # of three fields, then the second; 80x24 gave the bar five lines of 24
        parts = [first + second] if width < WIDE else [first, second]
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
        log = self.query_one("#log", DecisionLog)
        fresh = min(len(snap.decisions), snap.decisions_total - self._log_seen)
        for line in snap.decisions[len(snap.decisions) - fresh :] if fresh > 0 else ():
            log.say(Text(clean(line, 400)))
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

    def show_failure(self, text: str, gone: str | None, seen: FleetReadout | None) -> None:
        """An engine failure stays in the bar until a snapshot newer than `seen` (the app's
        latest when it heard of it) says otherwise, a snapshot carrying its own
        `engine_error`; `gone`: the controller ended on its own, saying why."""
        self._held = seen  # still on its way here, maybe: not to be drawn over the failure
        if gone is not None:  # no failure of this screen's
            bar = Text(" CONTROLLER ENDED ", style="bold reverse yellow")
            bar.append(f" {clean(gone, 300)}  (q quits)", style="bold yellow")
            self.query_one("#bar", Static).update(bar)
        elif seen is None or seen.engine_error is None:
            bar = Text(" ENGINE FAILED ", style="bold reverse red")
            bar.append(f" {text}  (q quits)", style="bold red")
            self.query_one("#bar", Static).update(bar)

    # -- selection ---------------------------------------------------------------------------
    def selected(self) -> InstanceSnap | None:
        if self.table_mode:
            iid = self.query_one(FleetTable).selected_id
        else:
            iid = self.query_one(FleetView).selected_id
        return self.operator.instance(iid)

    # -- the selected instance ---------------------------------------------------------------
    def action_detail(self) -> None:
        s = self.selected()
        if s is not None:
            self.app.push_screen(DetailScreen(self.engine, s.instance_id, self.operator))

    def on_data_table_row_selected(self, event: FleetTable.RowSelected) -> None:
        if isinstance(event.data_table, FleetTable):  # Enter on a table row
            self.action_detail()

    def action_stop(self) -> None:
        self.operator.stop(self.selected())

    def action_start(self) -> None:
        self.operator.start(self.selected())

    def action_destroy(self) -> None:
        self.operator.destroy(self.selected())

    def action_hand_over(self) -> None:
        self.operator.hand_over(self.selected())

    # -- the fleet ---------------------------------------------------------------------------
    def action_create(self) -> None:
        self.operator.create()

    def action_fleet_more(self) -> None:
        self.operator.resize(+1)

    def action_fleet_less(self) -> None:
        self.operator.resize(-1)

    def action_bulk_destroy(self) -> None:
        self.operator.bulk_destroy()

    # -- the view ----------------------------------------------------------------------------
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
        self.redraw()

    def action_toggle_view(self) -> None:
        """The other view, with the same instance selected."""
        chosen = self.selected()
        self.table_mode = not self.table_mode
        self.query_one(FleetView).display = not self.table_mode
        self.query_one(FleetTable).display = self.table_mode
        self.redraw()
        iid = chosen.instance_id if chosen else None
        shown: Any = self.query_one(FleetTable) if self.table_mode else self.query_one(FleetView)
        shown.select_id(iid)
        shown.focus()

    def action_filter(self) -> None:
        box = self.query_one("#filter", FilterInput)
        box.open(self.query_one(FleetView).filter)
        # at once, not after the keys already queued (`focus()` waits its turn): a fast
        # typist's Enter reached the fleet behind the box and opened a detail
        self.set_focus(box)

    def show_filter(self, text: str) -> None:
        """The fleet filtered by what the box holds so far, the box still open."""
        view = self.query_one(FleetView)
        if view.filter != text.strip():
            view.filter = text.strip()
            self.redraw()

    def apply_filter(self, text: str) -> None:
        self.query_one("#filter", Input).remove_class("visible")
        self.set_focus(self.query_one(FleetView))
        self.query_one(FleetView).filter = text.strip()
        self.redraw()
