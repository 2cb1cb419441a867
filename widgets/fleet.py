"""The fleet: a virtualised pane per instance (only visible lines render, whatever the count),
and a keyed, diffed table view for big fleets."""

from __future__ import annotations

from rentwatch.snapshot import InstanceSnap
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import DataTable

from .render import pane_lines

PANE_HEIGHT = 4
FADE_AFTER_S = 20 * 60  # dead attempts fold away after this much market time


def visible(
    snaps: tuple[InstanceSnap, ...], now: float, filter_text: str
) -> tuple[InstanceSnap, ...]:
    """What both views show: live attempts and recently dead ones, matching the filter."""
    shown = [s for s in snaps if s.ended_at is None or now - s.ended_at < FADE_AFTER_S]
    if filter_text:
        f = filter_text.lower()
        shown = [
            s
            for s in shown
            if f in f"{s.instance_id} {s.gpu_name} {s.phase} {s.machine_id}".lower()
        ]
    return tuple(shown)


class FleetView(ScrollView, can_focus=True):
    """One widget for all panes: `render_line` draws the line it is asked for, so a thousand
    instances cost what the screen shows, not a thousand widgets."""

    BINDINGS = [
        Binding("down,j", "move(1)", "Next", show=False),
        Binding("up,k", "move(-1)", "Previous", show=False),
    ]

    class Selected(Message):
        def __init__(self, instance_id: int | None) -> None:
            super().__init__()
            self.instance_id = instance_id

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.snaps: tuple[InstanceSnap, ...] = ()
        self.cursor = 0
        self.filter = ""
        self.now = 0.0

    def show(self, snaps: tuple[InstanceSnap, ...], now: float) -> None:
        selected = self.selected_id
        self.now = now
        self.snaps = visible(snaps, now, self.filter)
        ids = [s.instance_id for s in self.snaps]
        if selected in ids:
            self.cursor = ids.index(selected)
        self.cursor = min(self.cursor, max(0, len(self.snaps) - 1))
        self.virtual_size = Size(self.size.width, len(self.snaps) * PANE_HEIGHT)
        self.refresh()

    @property
    def selected_id(self) -> int | None:
        return self.snaps[self.cursor].instance_id if self.snaps else None

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

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index, line = divmod(y + self.scroll_offset.y, PANE_HEIGHT)
        if index >= len(self.snaps):
            if not self.snaps and y == 0:
                return Strip(
                    [Segment(" no instances yet: the engine is renting…", Style(dim=True))]
                ).extend_cell_length(width)
            return Strip.blank(width)
        text = pane_lines(self.snaps[index], index == self.cursor)[line]
        text.truncate(width, overflow="ellipsis")
        segments = list(text.render(self.app.console))
        return Strip(segments).extend_cell_length(width).crop(0, width)


class FleetTable(DataTable[str]):
    """The same fleet as a keyed table: rows added and removed as instances come and go, only
    the cells that changed are updated."""

    COLUMNS = ("id", "gpu", "machine", "$/h", "phase", "status", "util", "throttle", "billed")

    def on_mount(self) -> None:
        self.cursor_type = "row"
        for c in self.COLUMNS:
            self.add_column(c, key=c)
        self._cells: dict[str, tuple[str, ...]] = {}

    @staticmethod
    def _row(s: InstanceSnap) -> tuple[str, ...]:
        return (
            str(s.instance_id),
            s.gpu_name,
            str(s.machine_id),
            f"{s.dph:.3f}",
            s.phase,
            # a dead attempt's status age would keep growing: show the phase it ended in
            (s.status or "-")
            + (
                f" {s.status_age_s / 60:.1f}m"
                if s.status != "running" and s.ended_at is None
                else ""
            ),
            "-" if s.util is None else f"{s.util:.0f}%",
            s.throttle or "-",
            f"{s.billed_usd:.4f}",
        )

    def show(self, snaps: tuple[InstanceSnap, ...]) -> None:
        wanted = {str(s.instance_id): self._row(s) for s in snaps}
        with self.app.batch_update():
            for key in [k for k in self._cells if k not in wanted]:
                self.remove_row(key)
                del self._cells[key]
            for key, row in wanted.items():
                old = self._cells.get(key)
                if old is None:
                    self.add_row(*row, key=key)
                else:
                    for col, before, after in zip(self.COLUMNS, old, row, strict=True):
                        if before != after:
                            self.update_cell(key, col, after)
                self._cells[key] = row

    @property
    def selected_id(self) -> int | None:
        if not self._cells or self.cursor_row < 0 or self.cursor_row >= self.row_count:
            return None
        key = self.coordinate_to_cell_key((self.cursor_row, 0)).row_key.value
        return int(key) if key else None
