"""A CLI table in a pipe or a file keeps every cell whole (Rich alone cuts it at 80 columns)."""

from __future__ import annotations

from rentwatch.cli.tables import print_table
from rich.table import Table

WHY = "listed with a cuda_max_good of 12.2, under the campaign's 12.4 (its offer_query)"


def _table() -> Table:
    table = Table("machine", "why")
    table.add_row("235612", WHY)
    return table


def test_a_table_in_a_pipe_keeps_its_cells_whole(capsys):
    print_table(_table())
    out = capsys.readouterr().out
    assert "…" not in out
    assert WHY in out and "235612" in out
