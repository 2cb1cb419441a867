"""A table printed to stdout: fitted to the terminal there; in a pipe or a file, as wide as its
cells need (Rich's default of 80 columns cuts them)."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table


def print_table(table: Table) -> None:
    if sys.stdout.isatty():
        Console().print(table)
        return
    wide = Console(width=10_000).measure(table).maximum
    Console(width=max(80, wide)).print(table)
