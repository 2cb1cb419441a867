"""A command's ledger: which one it reads when `--ledger` is not given (the one of the user's
ledgers that knows what the command is about; the demo's is demo-ledger.duckdb, not the default
one), and reading it, through the controller that holds the file when one runs (DuckDB lets no
other process open it then), else read-only from the file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.errors import RentwatchError
from ..ledger.job_reads import literal

if TYPE_CHECKING:
    from ..ledger.readonly import QueryResult


@contextmanager
def reading(path: str | Path) -> Iterator[Any]:
    """The ledger at `path` to read (`query`, `receipt`): the controller holding it, else the
    file, read-only."""
    from ..ledger import Ledger
    from .controllers import controller_for_ledger

    remote = controller_for_ledger(path)
    with remote if remote is not None else Ledger(path, read_only=True) as ledger:
        yield ledger


def query(path: str | Path, sql: str, limit: int) -> QueryResult:
    """One read-only SELECT on the ledger at `path`, up to `limit` rows."""
    with reading(path) as ledger:
        return ledger.query(sql, limit)  # type: ignore[no-any-return]


def select(path: str | Path, sql: str, limit: int = 100_000) -> list[dict[str, Any]]:
    """The rows of one read-only SELECT on the ledger at `path`, as dicts."""
    return query(path, sql, limit).as_dicts()


class NoLedger(RentwatchError):
    title = "which ledger"


def user_ledgers() -> list[Path]:
    """The default ledger, then the rest in the data dir, then running controllers'; each once."""
    from ..ledger.store import default_ledger_path
    from ..run.service import registry

    default = default_ledger_path()
    found = [default, *sorted(p for p in default.parent.glob("*.duckdb") if p != default)]
    try:
        found += [Path(e.ledger) for e in registry.live_entries() if e.ledger]
    except OSError:  # no runtime dir: no controller runs
        pass
    seen: set[Path] = set()
    out = []
    for p in found:
        key = p.resolve()
        if key not in seen and p.exists():
            seen.add(key)
            out.append(p)
    return out


def _knows(path: Path, where: str) -> bool:
    try:
        rows = select(path, f"SELECT count(*) AS n FROM events WHERE {where}", 1)
    except RentwatchError:  # held by a process that is not a controller, or not a ledger
        return False
    return bool(rows and rows[0]["n"])


def ledger_for(
    given: str | None, *, campaign: str | None = None, instance: int | None = None
) -> Path:
    """The ledger named, else the one user ledger that knows `campaign` (or `instance`); the
    default one when it does. NoLedger says which exist when none or several do."""
    if given:
        return Path(given)
    from ..ledger.store import default_ledger_path

    if instance is not None:
        where, what = f"instance_id = {int(instance)}", f"instance {int(instance)}"
    elif campaign is not None:
        where, what = f"campaign = {literal(campaign)}", f"campaign {campaign!r}"
    else:
        where, what = "true", "any campaign"
    ledgers = user_ledgers()
    knowing = [p for p in ledgers if _knows(p, where)]
    default = default_ledger_path()
    if default in knowing or len(knowing) == 1:
        return default if default in knowing else knowing[0]
    names = ", ".join(str(p) for p in (knowing or ledgers)) or f"none in {default.parent}"
    if knowing:
        raise NoLedger(f"{what} is in {len(knowing)} ledgers ({names}): name one with --ledger")
    raise NoLedger(f"no ledger here knows {what} (ledgers: {names}); name one with --ledger PATH")
