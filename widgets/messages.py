"""The messages the dashboard hears from its engine, posted to the app from the engine's thread
(in order, through the app's queue): the fleet's snapshot, forwarded to the screens that show
it, and a failure."""

from __future__ import annotations

from rentwatch.views.snapshot import FleetReadout
from textual.message import Message


class FleetSnapshot(Message, bubble=False):  # forwarded to the screens: never back up
    """The engine's latest look at the fleet. Only the newest matters: one still queued is
    replaced by the next (a fast market polls faster than a screen draws)."""

    def __init__(self, readout: FleetReadout) -> None:
        super().__init__()
        self.readout = readout

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FleetSnapshot)


class EngineFailed(Message, bubble=False):
    """The engine (or the link to its controller) failed, or came back: `text` says which."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
