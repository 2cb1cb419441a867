"""Events the ledger could not take (a full disk), kept so nothing the engine did is forgotten: in
memory, in order, written as soon as a write goes through again; at close, to
`<ledger>.unwritten.jsonl` (0600), which the next writer adds back in order and says so."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

SUFFIX = ".unwritten.jsonl"


def fallback_path(ledger: Path) -> Path:
    return ledger.with_name(ledger.name + SUFFIX)


def write_fallback(ledger: Path, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Append `rows` to the fallback file; returns the sentence that says where they went."""
    path = fallback_path(ledger)
    text = "".join(json.dumps(dict(zip(columns, r, strict=True))) + "\n" for r in rows)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    except OSError as exc:
        return (
            f"{len(rows)} event(s) the ledger could not take could not be written to {path} "
            f"either ({exc.strerror or exc}): they are lost"
        )
    return f"{len(rows)} event(s) the ledger could not take were written to {path}"


def add_back(
    ledger: Path, columns: Sequence[str], last_seq: int, insert: Callable[[list[Any]], None]
) -> str | None:
    """Insert the fallback file's events that follow `last_seq`, in order; the file is
    removed once every event in it is in the ledger. Returns what to say (None: no file)."""
    path = fallback_path(ledger)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path} holds events the ledger could not take, unread: {exc.strerror or exc}"
    rows = []
    for line in lines:
        try:
            doc = json.loads(line)
        except ValueError:
            continue  # a line cut short by the full disk itself
        if isinstance(doc, dict) and isinstance(doc.get("seq"), int):
            rows.append(doc)
    added = kept = 0
    for doc in sorted(rows, key=lambda d: int(d["seq"])):
        if int(doc["seq"]) <= last_seq:
            kept += 1
            continue
        insert([doc.get(c) for c in columns])
        last_seq = int(doc["seq"])
        added += 1
    if not kept:
        path.unlink(missing_ok=True)
        return f"{added} event(s) an earlier run could not write were added back from {path}"
    return (
        f"{added} event(s) an earlier run could not write were added back from {path}; "
        f"{kept} could not be (their sequence numbers are taken): they stay in that file"
    )
