"""The keys a screen answers now, read from the bindings themselves (each screen's, its focused
widget's and the app's `BINDINGS`, as Textual's binding chain resolves them), so that the help
and the command palette list a key where it is written, once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.binding import Binding
from textual.dom import DOMNode
from textual.screen import Screen

PALETTE_ACTION = "command_palette"  # Textual's own binding (ctrl+p), listed beside ours


@dataclass(frozen=True)
class KeyLine:
    keys: tuple[str, ...]  # as the footer shows them ("esc", "enter", "?")
    text: str  # the binding's tooltip, else its description
    action: str
    node: DOMNode  # where it acts: the app (everywhere), the screen or one of its widgets
    everywhere: bool  # bound on the app, not on this screen


def declared(node: DOMNode, binding: Binding) -> bool:
    """Whether `binding` is written in a rentwatch class's BINDINGS (the widgets' inherited
    navigation keys, the cursor's and the editor's, are theirs to document), or is the
    palette's key."""
    if binding.action == PALETTE_ACTION:
        return True
    for cls in type(node).__mro__:
        if not cls.__module__.startswith(("rentwatch.", "widgets.")):
            continue
        for b in vars(cls).get("BINDINGS", ()):
            if isinstance(b, Binding) and (b.action, b.description) == (
                binding.action,
                binding.description,
            ):
                return True
    return False


def key_lines(screen: Screen[Any]) -> list[KeyLine]:
    """What `screen` answers now, a line per action (its keys together), the screen's own
    first and the app's after; what is disabled here (check_action) is left out."""
    app = screen.app
    lines: dict[tuple[int, str, str], KeyLine] = {}
    for _, (node, binding, _enabled, tooltip) in screen.active_bindings.items():
        if not declared(node, binding):
            continue
        at = (id(node), binding.action, binding.description)
        shown = app.get_key_display(binding)
        got = lines.get(at)
        if got is not None:
            lines[at] = KeyLine((*got.keys, shown), got.text, got.action, node, got.everywhere)
            continue
        text = tooltip or binding.tooltip or binding.description or binding.action
        lines[at] = KeyLine((shown,), text, binding.action, node, node is app)
    out = list(lines.values())
    return [k for k in out if not k.everywhere] + [k for k in out if k.everywhere]
