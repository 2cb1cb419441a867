"""Showing and exporting query results: a table, JSON, CSV, Parquet."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import duckdb

from ..core.errors import RentwatchError
from .readonly import QueryResult


def print_result(result: QueryResult, fmt: str, limit: int) -> None:
    if fmt == "json":
        print(json.dumps(result.as_dicts(), default=str, indent=1))
    elif fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(result.columns)
        w.writerows(result.rows)
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(*result.columns)
        for row in result.rows:
            table.add_row(*(Text("" if v is None else str(v)) for v in row))  # host text stays text
        Console().print(table)
    if result.truncated:
        print(
            f"(more than {limit} rows; showing the first {limit}, raise --limit to see more)",
            file=sys.stderr,
        )


def export_result(result: QueryResult, path: str) -> None:
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix == ".csv":
        with target.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(result.columns)
            w.writerows(result.rows)
    elif suffix == ".parquet":
        con = duckdb.connect()
        cols = ", ".join(f'"{c}" VARCHAR' for c in result.columns) or '"empty" VARCHAR'
        con.execute(f"CREATE TABLE r ({cols})")
        if result.rows:
            con.executemany(
                f"INSERT INTO r VALUES ({', '.join('?' * len(result.columns))})",
                [[None if v is None else str(v) for v in row] for row in result.rows],
            )
        con.execute("COPY r TO ? (FORMAT parquet)", [str(target)])
        con.close()
    else:
        raise RentwatchError(f"export to .csv or .parquet, not {suffix or 'a file without suffix'}")
