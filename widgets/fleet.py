"""The fleet: a virtualised pane per instance (only visible lines render, whatever the count),
and a keyed, diffed table view for big fleets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

from rentwatch.views.snapshot import InstanceSnap
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import Row, RowKey

from .render import ENDED, live_util, pane_lines

PANE_HEIGHT = 4
FADE_AFTER_S = 20 * 60  # dead attempts fold away after this much market time
# a stopped or abandoned rental still bills (storage, or until its destroy): it never folds away
GONE_PHASES = frozenset({"destroyed", "lost"})


# the phases in the order an operator scans them: what needs a look first
STATE_ORDER = {
    p: i
    for i, p in enumerate(
        (
            "lost",
            "verifying",
            "running",
            "booting",
            "requested",
            "working",
            "idle",
            "verified",
            "stopped",
            "abandoned",
            "destroyed",
        )
    )
}
# each sort's key, in its own order (the money sorts highest first); "new" is the engine's own
# order (live first, newest first); `o` cycles the first five
SORTS: dict[str, Callable[[InstanceSnap], Any] | None] = {
    "new": None,
    "billed": lambda s: -s.billed_usd,
    "state": lambda s: (STATE_ORDER.get(s.phase, 99), -s.created_at),
    "age": lambda s: s.created_at,
    "$/h": lambda s: (-s.rate, -s.billed_usd),
    "id": lambda s: s.instance_id,
    "gpu": lambda s: (s.gpu_name, s.instance_id),
    "machine": lambda s: (s.machine_id is None, s.machine_id or 0),
    "status": lambda s: (s.status or "", s.instance_id),
    "util": lambda s: -(live_util(s) if live_util(s) is not None else -1.0),
    "throttle": lambda s: (not s.throttle, s.throttle, s.instance_id),  # throttled first
}
SORT_NAMES = ("new", "billed", "state", "age", "$/h")  # what `o` cycles
# the sorts whose own order is highest first (the table's header arrow points down)
DESCENDING = frozenset({"billed", "$/h", "util"})


def column_sort(column: str) -> str:
    """The sort a table column's header (or its number key) picks."""
    return "state" if column == "phase" else column


def sort_label(sort: str, reverse: bool) -> str:
    """How the bar names the order: the sort, and "reversed" when it runs the other way."""
    return f"{sort} reversed" if reverse else sort


def visible(
    snaps: tuple[InstanceSnap, ...],
    now: float,
    filter_text: str,
    sort: str = "new",
    reverse: bool = False,
) -> tuple[InstanceSnap, ...]:
    """What both views show, in the chosen order: live attempts and recently dead ones,
    matching the filter."""
    shown = [
        s
        for s in snaps
        if s.ended_at is None or s.phase not in GONE_PHASES or now - s.ended_at < FADE_AFTER_S
    ]
    if filter_text:
        f = filter_text.lower()
        shown = [
            s
            for s in shown
            if f in f"{s.instance_id} {s.gpu_name} {s.phase} {s.machine_id}".lower()
        ]
    key = SORTS.get(sort)
    if key is not None:
        shown.sort(key=key, reverse=reverse)
    elif reverse:
        shown.reverse()
    return tuple(shown)


def _cut(text: str, most: int) -> str:
    """`text` in at most `most` cells, an ellipsis where it was cut (Enter shows it whole)."""
    return text if len(text) <= most else text[: most - 1] + "…"


def _util_cell(s: InstanceSnap) -> str:
    """Utilization, and the card's temperature where it reported one (a hot card delivers
    less): both only while the GPU runs for us."""
    util = live_util(s)
    if util is None:
        return "-"
    return f"{util:.0f}%" + (f" {s.temp_c:.0f}°C" if s.temp_c is not None else "")


class FleetView(ScrollView, can_focus=True):
    """One widget for all panes: `render_line` draws the line it is asked for, so a thousand
    instances cost what the screen shows, not a thousand widgets."""

    BINDINGS = [
        Binding("down", "move(1)", "Next", show=False),
        Binding("up", "move(-1)", "Previous", show=False),
    ]

    class Selected(Message):
        def __init__(self, instance_id: int | None) -> None:
            super().__init__()
            self.instance_id = instance_id

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.snaps: tuple[InstanceSnap, ...] = ()
        self.total = 0  # instances in the latest snapshot, shown or not
        self.cursor = 0
        self.filter = ""
        self.sort = "new"
        self.reverse = False
        self.now = 0.0

    def show(self, snaps: tuple[InstanceSnap, ...], now: float) -> None:
        selected = self.selected_id
        self.now = now
        self.total = len(snaps)
        self.snaps = visible(snaps, now, self.filter, self.sort, self.reverse)
        ids = [s.instance_id for s in self.snaps]
        if selected in ids:
            self.cursor = ids.index(selected)
        self.cursor = min(self.cursor, max(0, len(self.snaps) - 1))
        # as wide as the room beside the scrollbar: the full width made a horizontal scrollbar
        # take the last pane's last line once the panes outgrew the view (80x24)
        width = self.scrollable_content_region.width
        self.virtual_size = Size(width, len(self.snaps) * PANE_HEIGHT)
        self.refresh()

    @property
    def selected_id(self) -> int | None:
        return self.snaps[self.cursor].instance_id if self.snaps else None

    def select_id(self, instance_id: int | None) -> None:
        """Put the cursor on `instance_id` where it is shown (the other view's selection)."""
        ids = [s.instance_id for s in self.snaps]
        if instance_id in ids:
            self.cursor = ids.index(instance_id)
            self.action_move(0)

    def action_move(self, delta: int) -> None:
        if not self.snaps:
            return
        self.cursor = max(0, min(len(self.snaps) - 1, self.cursor + delta))
        top = self.cursor * PANE_HEIGHT
        if top < self.scroll_offset.y:
            self.scroll_to(y=top, animate=False)
        elif top + PANE_HEIGHT > self.scroll_offset.y + self.size.height:
            self.scroll_to(y=top + PANE_HEIGHT - self.size.height, animate=False)
        self.refresh()
        self.post_message(self.Selected(self.selected_id))

    def empty_text(self) -> str:
        """What an empty fleet view says: why nothing is shown."""
        if self.filter:
            return f" no instance matches the filter {self.filter!r} (/ changes it)"
        if self.total:
            return " no live instance: the ones that ended fold away after 20 min"
        return " no instances yet: the engine is renting…"

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        index, line = divmod(y + self.scroll_offset.y, PANE_HEIGHT)
        if index >= len(self.snaps):
            if not self.snaps and y == 0:
                return Strip([Segment(self.empty_text(), Style(dim=True))]).extend_cell_length(
                    width
                )
            return Strip.blank(width)
        text = pane_lines(self.snaps[index], index == self.cursor, width)[line]
        text.truncate(width, overflow="ellipsis")
        segments = list(text.render(self.app.console))
        return Strip(segments).extend_cell_length(width).crop(0, width)


class FleetTable(DataTable[str]):
    """The same fleet as a keyed table. Rows are added and removed as instances come and go;
    cells are computed and updated only for the rows on screen (and what scrolls into view),
    so a 10,000-row fleet whose every bill ticks costs what the screen shows, not 10,000
    updates a second."""

    # the money columns before the status, which takes the width left (cut where it is short:
    # at 80 columns util, throttle and billed were pushed off by a status line)
    COLUMNS = ("id", "gpu", "machine", "$/h", "phase", "util", "throttle", "billed", "status")
    MARGIN = 2  # rows above and below the window kept fresh, for a smooth cursor move
    BINDINGS = [
        # the table's own Enter (a hidden "select") hid the app's Detail from the footer
        Binding("enter", "select_cursor", "Detail", id="table.detail"),
    ]
    # a column grows to its longest cell: one long reason (a fatal status line quoted whole)
    # pushed the columns after it off screen. The throttle and the status have fixed widths:
    # the throttle's by the screen's, the status, last, the room the others leave it
    WIDEST = {"status": 28, "throttle": 18}
    NARROW_THROTTLE = 12  # under 100 columns
    LEAST_STATUS = 8

    # DataTable keys its row order and line offsets on a counter that every cell update bumps,
    # so one changed cell rebuilds both lists over all rows (about 100 ms a poll at 10,000).
    # Here they are keyed on the table's shape instead (rows added, removed or reordered):
    # a cell update does not move a row, and every row is one line high.
    _shape = 0
    _rows_key: tuple[int, int] | None = None
    _rows_cached: list[Row[str]] = []
    _offsets_key: tuple[int, int] | None = None
    _offsets_cached: list[tuple[RowKey, int]] = []
    _hidden: tuple[int, int] | None = None  # the selected id while it is not shown, and the row

    def add_row(self, *cells: str, **kw: Any) -> RowKey:  # type: ignore[override]
        key = super().add_row(*cells, **kw)
        self._shape += 1
        return key

    def remove_row(self, row_key: RowKey | str) -> None:
        super().remove_row(row_key)
        self._shape += 1

    def sort(self, *columns: Any, **kw: Any) -> Self:
        out = super().sort(*columns, **kw)
        self._shape += 1
        return out

    def clear(self, columns: bool = False) -> Self:
        out = super().clear(columns)
        self._shape += 1
        return out

    @property
    def ordered_rows(self) -> list[Row[str]]:
        key = (self.row_count, self._shape)
        if self._rows_key != key:
            self._rows_cached = DataTable.ordered_rows.fget(self)  # type: ignore[attr-defined]
            self._rows_key = key
        return self._rows_cached

    @property
    def _y_offsets(self) -> list[tuple[RowKey, int]]:
        key = (self.row_count, self._shape)
        if self._offsets_key != key:
            self._offsets_cached = [
                (row.key, y) for row in self.ordered_rows for y in range(row.height)
            ]
            self._offsets_key = key
        return self._offsets_cached

    def on_mount(self) -> None:
        self.cursor_type = "row"
        for c in self.COLUMNS:
            self.add_column(c, key=c)
        self._widths = (self.WIDEST["throttle"], self.WIDEST["status"])
        self._fitted = False
        self._sorted: tuple[str, bool] | None = None
        self._cells: dict[str, tuple[str, ...]] = {}  # what each row shows now
        self._snaps: dict[str, InstanceSnap] = {}  # the latest snapshot of each row
        self._order: list[str] = []

    def show_sort(self, sort: str, reverse: bool) -> None:
        """The arrow on the header of the column the fleet is sorted by: down where the
        highest comes first."""
        if getattr(self, "_sorted", None) == (sort, reverse):
            return
        self._sorted = (sort, reverse)
        for c in self.COLUMNS:
            label = c
            if column_sort(c) == sort:
                label += " ▼" if (sort in DESCENDING) != reverse else " ▲"
            column = self.columns[c]
            if column.label.plain != label:
                column.label = Text(label)
                column.content_width = max(column.content_width, len(label))
        self._require_update_dimensions = True
        self._clear_caches()
        self.refresh()

    def _fitted_widths(self) -> tuple[int, int]:
        """The throttle's cells (fewer under 100 columns) and the status's: the table's
        width less the other columns' and the padding (a 200-column screen shows a long
        status line; 80 keeps util, throttle and billed in sight)."""
        others = sum(
            col.get_render_width(self)
            for key, col in self.columns.items()
            if key not in ("status", "throttle")
        )
        free = self.scrollable_content_region.width - others - 4 * self.cell_padding
        if self.size.width >= 100:
            throttle = self.WIDEST["throttle"]
        else:  # billed must stay in sight: the throttle gives way, down to its heading's width
            throttle = max(len("throttle"), min(self.NARROW_THROTTLE, free))
        return throttle, max(self.LEAST_STATUS, free - throttle)

    def _fit(self) -> bool:
        """The throttle and status columns at their fitted widths (fixed: a cell update never
        measures the whole column); whether they changed, their cells then cut again."""
        widths = self._fitted_widths()
        if self._fitted and widths == self._widths:
            return False
        self._widths, self._fitted = widths, True
        for key, width in zip(("throttle", "status"), widths, strict=True):
            column = self.columns[key]
            column.auto_width, column.width = False, width
        self._require_update_dimensions = True
        self._clear_caches()
        self.refresh()
        return True

    def on_resize(self) -> None:
        if getattr(self, "_cells", None) is not None and self._fit():
            self._freshen(every=True)

    @staticmethod
    def _row(
        s: InstanceSnap, widths: tuple[int, int] = (WIDEST["throttle"], WIDEST["status"])
    ) -> tuple[str, ...]:
        return (
            str(s.instance_id),
            s.gpu_name,
            str(s.machine_id),
            s.rate_figure,
            s.phase,
            _util_cell(s),
            _cut("-" if s.phase in ENDED else s.throttle or "-", widths[0]),
            f"{s.billed_usd:.4f}",
            # a dead attempt's status age would keep growing: show why it ended instead
            _cut(
                s.left_why
                if s.ended_at is not None and s.left_why
                else (s.status or "-")
                + (
                    f" {s.status_age_s / 60:.1f}m"
                    if s.status != "running" and s.ended_at is None
                    else ""
                ),
                widths[1],
            ),
        )

    def show(self, snaps: tuple[InstanceSnap, ...]) -> None:
        """Rows diffed by instance id; the cursor stays on the instance it was on, whatever
        was added, removed or re-sorted above it (a key pressed next acts on that one)."""
        latest = {str(s.instance_id): s for s in snaps}
        order = list(latest)
        selected = self.selected_id
        if self._hidden is not None and self.cursor_row == self._hidden[1]:
            selected = self._hidden[0]  # chosen, hidden a while (a filter), not moved off since
        with self.app.batch_update():
            for key in [k for k in self._cells if k not in latest]:
                self.remove_row(key)
                del self._cells[key]
            for key, snap in latest.items():
                if key not in self._cells:
                    row = self._row(snap, self._widths)
                    self.add_row(*row, key=key)
                    self._cells[key] = row
            self._snaps = latest
            if order != self._order:
                where = {k: i for i, k in enumerate(order)}
                was = set(self._order)
                # rows kept stay where they were, rows added went to the end
                now = [k for k in self._order if k in where] + [k for k in order if k not in was]
                if now != order:
                    self.sort("id", key=lambda iid: where.get(iid, len(where)))  # type: ignore[arg-type]
                self._order = order
            self._hidden = None
            if selected is not None and str(selected) not in self._cells:
                self._hidden = (selected, self.cursor_row)
            self.select_id(selected)
            self._freshen()
        # the other columns grow with what they show, measured after this refresh
        self.call_after_refresh(self.on_resize)

    def select_id(self, instance_id: int | None) -> None:
        """Put the cursor on the row of `instance_id`, where it has one."""
        if instance_id is None or str(instance_id) not in self._cells:
            return
        row = self.get_row_index(str(instance_id))
        if row != self.cursor_row:
            self.move_cursor(row=row, animate=False)

    def _freshen(self, every: bool = False) -> None:
        """Bring the rows on screen (`every`: all rows, after a resize) up to their latest
        snapshot, changed cells only."""
        if not self._cells:
            return
        top = 0 if every else max(0, int(self.scroll_y) - self.MARGIN)
        bottom = min(
            self.row_count,
            self.row_count if every else int(self.scroll_y) + self.size.height + self.MARGIN,
        )
        for index in range(top, bottom):
            key = self.coordinate_to_cell_key((index, 0)).row_key.value
            snap = self._snaps.get(key or "")
            if key is None or snap is None:
                continue
            row = self._row(snap, self._widths)
            old = self._cells[key]
            if row == old:
                continue
            for col, before, after in zip(self.COLUMNS, old, row, strict=True):
                if before != after:
                    self.update_cell(key, col, after)
            self._cells[key] = row

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if getattr(self, "_cells", None):
            self._freshen()  # rows scrolled into view show their latest figures

    @property
    def selected_id(self) -> int | None:
        if not self._cells or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        key = self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value
        return int(key) if key else None
