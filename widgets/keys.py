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
    bound: tuple[str, ...]  # as bound ("escape", "enter", "question_mark")
    text: str  # the binding's tooltip, else its description
    action: str
    node: DOMNode  # where it acts: the app (everywhere), the screen or one of its widgets
    everywhere: bool  # bound on the app, not on this screen


def declared_at(node: DOMNode, binding: Binding) -> int | None:
    """Where `binding` is written in a rentwatch class's BINDINGS (None: not in ours, as the
    widgets' inherited navigation keys, the cursor's and the editor's, which are theirs to
    document); the palette's key comes last."""
    if binding.action == PALETTE_ACTION:
        return 1000
    for cls in type(node).__mro__:
        if not cls.__module__.startswith(("rentwatch.", "widgets.")):
            continue
        for at, b in enumerate(vars(cls).get("BINDINGS", ())):
            if isinstance(b, Binding) and (b.action, b.description) == (
                binding.action,
                binding.description,
            ):
                return at
    return None


def key_lines(screen: Screen[Any], grouped: bool = True) -> list[KeyLine]:
    """What `screen` answers now, a line per action (its keys together), its focused
    widget's and its own first, the app's after, each in the order of its BINDINGS; what is
    disabled here (check_action) is left out. `grouped`: a group of bindings (the sort keys
    1..9) as one line, as the help shows it; the palette lists each of them."""
    app = screen.app
    lines: dict[tuple[int, str, str], KeyLine] = {}
    order: dict[tuple[int, str, str], tuple[int, int]] = {}
    nodes: list[int] = []  # the focused widget first, then up to the screen, then the app
    for _key, (node, binding, _enabled, tooltip) in screen.active_bindings.items():
        written = declared_at(node, binding)
        if written is None:
            continue
        if id(node) not in nodes:
            nodes.append(id(node))
        # one line a binding (its keys together), or a group of them (the sort keys 1..9)
        group = binding.group.description if grouped and binding.group else ""
        at = (id(node), group or binding.action, group or binding.description)
        shown = app.get_key_display(binding)
        got = lines.get(at)
        if got is not None:
            keys, bound = (*got.keys, shown), (*got.bound, binding.key)
            lines[at] = KeyLine(keys, bound, got.text, got.action, node, got.everywhere)
            continue
        text = group or tooltip or binding.tooltip or binding.description or binding.action
        lines[at] = KeyLine((shown,), (binding.key,), text, binding.action, node, node is app)
        order[at] = (nodes.index(id(node)), written)
    # as written in BINDINGS (a priority key overriding a widget's took that key's place)
    return [lines[at] for at in sorted(lines, key=lambda at: order[at])]
