"""Showing and exporting query results: a table, JSON, CSV, Parquet. Every string leaves through
`clean`: ledger rows carry host and market text."""

from __future__ import annotations

import csv
import json
import math
import shutil
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

import duckdb

from ..core.errors import RentwatchError
from ..core.text import clean
from .private import private_replacement
from .readonly import QueryResult

CELL_LIMIT = 4000  # the ledger caps reasons at 2000; details are JSON of bounded fields


def safe_value(v: object) -> object:
    """A cell as it may be shown or written: text cleaned, numbers and None as they are."""
    if v is None or isinstance(v, bool | int | float):
        return v
    return clean(v, CELL_LIMIT)


def safe_rows(result: QueryResult) -> tuple[list[str], list[list[object]]]:
    columns = [clean(c, 200) for c in result.columns]
    return columns, [[safe_value(v) for v in row] for row in result.rows]


def print_result(result: QueryResult, fmt: str, limit: int, width: int | None = None) -> None:
    """`width`: the table's most columns (None: the terminal's, as rich measures it)."""
    columns, rows = safe_rows(result)
    if fmt == "json":
        # NaN and infinities (a market's lie kept as evidence) are not JSON: null instead
        dicts = [
            {
                c: None if isinstance(v, float) and not math.isfinite(v) else v
                for c, v in zip(columns, row, strict=True)
            }
            for row in rows
        ]
        print(json.dumps(dicts, default=lambda v: clean(v, CELL_LIMIT), indent=1, allow_nan=False))
    elif fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")  # a pipe to cut or awk: plain lines
        w.writerow(columns)
        w.writerows(rows)
    else:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        table = Table(*columns)
        for row in rows:
            table.add_row(*(Text("" if v is None else str(v)) for v in row))  # text, not markup
        Console(width=width).print(table)
    if result.truncated:
        print(
            f"(more than {limit} rows; showing the first {limit}, raise --limit to see more)",
            file=sys.stderr,
        )


def export_result(result: QueryResult, path: str) -> None:
    """Write `result` to `path` with rentwatch's code (a query cannot write files): 0600, renamed
    over `path`; a symlink at `path` is refused (private.py)."""
    target = Path(path)
    suffix = target.suffix.lower()
    columns, rows = safe_rows(result)
    if suffix not in (".csv", ".parquet"):
        raise RentwatchError(f"export to .csv or .parquet, not {suffix or 'a file without suffix'}")
    if target.is_dir():
        raise RentwatchError(f"cannot export to {clean(path, 300)}: it is a folder")
    with private_replacement(target) as out:
        _write(out, columns, rows, path, suffix[1:])


def _write(
    out: BinaryIO, columns: list[str], rows: list[list[object]], path: str, fmt: str
) -> None:
    """DuckDB writes CSV and Parquet only to a path: a private in-memory instance (the ledger's
    cannot write files) writes to one in a folder of our own under the system's temporary folder
    (sticky, so no one else can swap it), copied from there into `out`."""
    with tempfile.TemporaryDirectory(prefix="rentwatch-export-") as room:
        made = Path(room) / f"export.{fmt}"
        con = duckdb.connect()
        try:
            # kept by position, named as the COPY writes them: a result may name two columns
            # alike (the second is written a_1), which a table refuses
            cells = [f"c{i}" for i in range(len(columns))] or ["c"]
            con.execute(f"CREATE TABLE r ({', '.join(c + ' VARCHAR' for c in cells)})")
            if rows:
                con.executemany(
                    f"INSERT INTO r VALUES ({', '.join('?' * len(columns))})",
                    [[None if v is None else str(v) for v in row] for row in rows],
                )
            names = [c.replace('"', '""') for c in columns]
            named = ", ".join(f'{c} AS "{n}"' for c, n in zip(cells, names, strict=False))
            # a file's CSV is RFC 4180's, CRLF line ends (a pipe's is plain lines: print_result)
            options = "FORMAT csv, HEADER, NEW_LINE '\\r\\n'" if fmt == "csv" else "FORMAT parquet"
            con.execute(f"COPY (SELECT {named or '*'} FROM r) TO ? ({options})", [str(made)])
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise RentwatchError(f"cannot write {clean(path, 300)}: {clean(msg, 300)}") from None
        finally:
            con.close()
        with made.open("rb") as f:
            shutil.copyfileobj(f, out)
