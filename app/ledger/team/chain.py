"""Each ledger's events as a hash chain: an event's hash covers its fields and the hash of the
ledger's event before it, so the store cannot edit, drop or reorder an event of one controller
without `rentwatch reconcile --team` naming it. Pure: rows in, hashes and findings out."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import Any

GENESIS = "0" * 64  # the "previous hash" of a ledger's first event


def event_hash(prev: str, ledger_id: str, operator: str, row: Sequence[Any]) -> str:
    """The hash of one event: its ledger, operator and fields (in `EVENT_COLUMNS`), and `prev`."""
    body = json.dumps([prev, ledger_id, operator, *row], separators=(",", ":"), default=str)
    return hashlib.sha256(body.encode()).hexdigest()


def chain(
    prev: str, ledger_id: str, operator: str, rows: Iterable[Sequence[Any]]
) -> list[tuple[str, str]]:
    """(previous hash, hash) of each row in turn, following `prev`."""
    hashes = list(
        accumulate(rows, lambda p, r: event_hash(p, ledger_id, operator, r), initial=prev)
    )
    return list(zip(hashes, hashes[1:], strict=False))


@dataclass(frozen=True)
class Finding:
    """One thing wrong with a ledger's chain in the store."""

    operator: str
    ledger_id: str
    seq: int  # the first event it concerns
    problem: str  # "edited" | "missing" | "relinked" | "foreign"
    detail: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def verify(
    ledger_id: str,
    operator: str,
    rows: Iterable[tuple[Sequence[Any], str, str, str]],
    shipped_to: int = 0,
) -> list[Finding]:
    """Check one ledger's chain as the store holds it (rows in `seq` order). `shipped_to` is the
    furthest event its controller said it shipped: the store must hold up to there. One edit
    names one event, not all after it."""
    out: list[Finding] = []
    last_seq, last_hash = 0, GENESIS

    def say(seq: int, problem: str, detail: str) -> None:
        out.append(Finding(operator, ledger_id, seq, problem, detail))

    for fields, prev, h, named in rows:
        seq = int(fields[0])
        if named != operator:
            say(seq, "foreign", f"event {seq} names operator {named!r}, not {operator!r}")
        if seq != last_seq + 1:
            say(last_seq + 1, "missing", f"events {last_seq + 1}..{seq - 1} are not in the store")
        elif prev != last_hash:
            say(seq, "relinked", f"event {seq} does not follow the event before it")
        if event_hash(prev, ledger_id, named, fields) != h:
            say(seq, "edited", f"event {seq} ({fields[12]}) differs from what was shipped")
        last_seq, last_hash = seq, h
    if shipped_to > last_seq:
        gone = f"events {last_seq + 1}..{shipped_to} were shipped and are gone"
        say(last_seq + 1, "missing", gone)
    return out


def compare(
    ledger_id: str,
    operator: str,
    local: Iterable[Sequence[Any]],
    stored: dict[int, tuple[str, str]],
) -> tuple[list[Finding], int]:
    """A ledger's own events against what the store holds for it: those whose stored hash is not
    this chain's (`differs`), those the store holds that this ledger never wrote (`foreign`), and
    how many are not shipped yet."""
    out: list[Finding] = []
    prev, seen, unshipped = GENESIS, set(), 0
    for row in local:
        seq = int(row[0])
        h, named = stored.get(seq, ("", operator))
        prev = event_hash(prev, ledger_id, named, row)
        seen.add(seq)
        if seq not in stored:
            unshipped += 1
        elif h != prev:
            why = f"event {seq} in the store is not the one this ledger wrote"
            out.append(Finding(operator, ledger_id, seq, "differs", why))
    for seq in sorted(set(stored) - seen):
        why = f"the store holds an event {seq} this ledger never wrote"
        out.append(Finding(operator, ledger_id, seq, "foreign", why))
    return out, unshipped
