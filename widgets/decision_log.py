"""The decision log: a wrapped log that wraps its lines again when its width changes."""

from __future__ import annotations

from collections import deque

from rich.text import Text
from textual.events import Resize
from textual.widgets import RichLog


class DecisionLog(RichLog):
    """A `RichLog` keeping the lines it was given: it wraps each at the width it has when
    written, so after the terminal narrowed every earlier line ran past the edge, cut."""

    # the width a line is wrapped at stays the same as the log fills: a scrollbar showing up
    # cut the lines written before it by its width (and re-wrapping then could toggle it)
    DEFAULT_CSS = "DecisionLog { scrollbar-gutter: stable; }"

    def __init__(self, *, max_lines: int, min_width: int, id: str) -> None:
        # plain text: the lines are the ledger's reasons, host text among them, never markup
        super().__init__(
            wrap=True,
            markup=False,
            highlight=False,
            min_width=min_width,
            max_lines=max_lines,
            id=id,
        )
        self._said: deque[Text] = deque(maxlen=max_lines)
        self._wrapped_at = 0

    def say(self, line: Text) -> None:
        self._said.append(line)
        self.write(line)

    def on_resize(self, event: Resize) -> None:
        width = self.scrollable_content_region.width
        if width == self._wrapped_at:
            return  # a new height only (the fleet's room changed): the lines still fit
        first = not self._wrapped_at
        self._wrapped_at = width
        if first:
            return  # what was written before the first size is wrapped at it by RichLog
        self.clear()
        for line in self._said:
            self.write(line)
