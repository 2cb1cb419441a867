"""The receipt as a person reads it in a terminal: one table per campaign, the same rows
`rentwatch receipt` prints and a headless run prints when its campaign ends."""

from __future__ import annotations

from typing import Any

from ..ledger.receipt import format_receipt


def print_receipts(receipts: list[dict[str, Any]], console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    if not receipts:
        console.print("the ledger holds no creates yet")
    for r in receipts:
        table = Table(title=Text(f"receipt: {r['campaign']}"), show_header=False)
        table.add_column("what")
        table.add_column("figure", justify="right")
        for label, value in format_receipt(r):
            table.add_row(Text(label), Text(value))  # text, never markup
        console.print(table)
