"""Private files (issue 30, items 8 and 9): the ledger's write-ahead log is its owner's only for
the writer's whole lifetime (the umask was 077 only around the first connect, and DuckDB makes
the WAL again after each checkpoint: a live WAL was 0644), and `rentwatch ledger --export`
writes 0600 to a file of its own, refusing a symlink planted at its path."""

from __future__ import annotations

import os
import stat

import pytest
from rentwatch.core.errors import RentwatchError
from rentwatch.ledger import Ledger
from rentwatch.ledger.export import export_result
from rentwatch.ledger.readonly import QueryResult


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


@pytest.fixture
def open_umask():
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_the_wal_and_all_a_writer_creates_are_private_for_its_lifetime(tmp_path, open_umask):
    from rentwatch.ledger import private

    others = private._holders  # writers an earlier test left open in this process (xdist)
    path = tmp_path / "l.duckdb"
    led = Ledger(path)
    for i in range(50):
        led.record("note", at=float(i), actor="engine", reason="job run: secret " * 20)
    wal = path.with_name(path.name + ".wal")
    assert wal.exists(), "the writes above should have a live WAL"
    assert mode(wal) == 0o600 and mode(path) == 0o600
    # the WAL is made again after each checkpoint: what the process creates now is private
    (tmp_path / "later").write_text("x")
    assert mode(tmp_path / "later") == 0o600
    led.close()
    (tmp_path / "after").write_text("x")
    if others == 0:  # the last writer to close gives the umask back
        assert mode(tmp_path / "after") == 0o644, "the umask is given back when the writer closes"


def test_a_writer_opened_after_the_umask_was_loosened_is_still_private(tmp_path):
    """The umask is the process's: with one writer already open, something else loosens it
    (a library, a test fixture); the next writer must not trust the hold it finds."""
    old = os.umask(0o022)
    try:
        first = Ledger(tmp_path / "first.duckdb")
        os.umask(0o022)
        path = tmp_path / "second.duckdb"
        led = Ledger(path)
        for i in range(50):
            led.record("note", at=float(i), actor="engine", reason="secret " * 20)
        wal = path.with_name(path.name + ".wal")
        assert wal.exists() and mode(wal) == 0o600 and mode(path) == 0o600
        led.close()
        first.close()
    finally:
        os.umask(old)


def test_a_ledger_left_readable_by_an_older_version_is_made_private(tmp_path, open_umask):
    path = tmp_path / "l.duckdb"
    Ledger(path).close()
    os.chmod(path, 0o644)
    led = Ledger(path)
    assert mode(path) == 0o600
    led.close()


RESULT = QueryResult(["a", "b"], [(1, "x"), (2, "y")], False)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_export_is_private_and_refuses_a_planted_symlink(tmp_path, open_umask, suffix):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    target = tmp_path / f"out{suffix}"
    target.symlink_to(victim)
    with pytest.raises(RentwatchError, match="symlink"):
        export_result(RESULT, str(target))
    assert victim.read_text() == "precious" and target.is_symlink()
    target.unlink()
    export_result(RESULT, str(target))
    assert mode(target) == 0o600 and not target.is_symlink()
    export_result(RESULT, str(target))  # an existing file of ours is replaced
    assert mode(target) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([victim.name, target.name])


def test_a_failed_export_leaves_nothing_behind(tmp_path, open_umask):
    short_row = QueryResult(["a", "b"], [(1,)], False)  # the parquet writer refuses it
    with pytest.raises(RentwatchError, match="cannot write"):
        export_result(short_row, str(tmp_path / "o.parquet"))
    assert list(tmp_path.iterdir()) == []


def _swap_everything_beside(target, victim) -> int:
    """Another user in a shared folder without the sticky bit: every name beside `target` is
    swapped for a symlink to `victim`; a folder is renamed away and replaced by one whose
    entries are such symlinks. Returns how many names were swapped."""
    swapped = 0
    for entry in list(target.parent.iterdir()):
        if entry.name in (target.name, victim.name):
            continue
        if entry.is_dir() and not entry.is_symlink():
            inside = [p.name for p in entry.iterdir()] or ["export.part"]
            entry.rename(entry.with_name(entry.name + ".theirs"))
            entry.mkdir()
            for name in inside:
                (entry / name).symlink_to(victim)
        else:
            entry.unlink()
            entry.symlink_to(victim)
        swapped += 1
    return swapped


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_an_export_follows_no_name_swapped_while_it_writes(
    tmp_path, open_umask, suffix, monkeypatch
):
    from rentwatch.ledger import export

    shared = tmp_path / "shared"
    shared.mkdir()
    victim = shared / "victim.txt"
    victim.write_text("precious")
    target = shared / f"out{suffix}"
    swaps: list[int] = []
    real = export._write

    def raced(*args, **kwargs):
        swaps.append(_swap_everything_beside(target, victim))
        return real(*args, **kwargs)

    monkeypatch.setattr(export, "_write", raced)
    export_result(RESULT, str(target))
    assert swaps and swaps[0] >= 1  # the race found what the export had made beside its target
    assert victim.read_text() == "precious"
    assert not target.is_symlink() and stat.S_ISREG(os.lstat(target).st_mode)
    assert mode(target) == 0o600
    if suffix == ".csv":
        assert target.read_text().splitlines() == ["a,b", "1,x", "2,y"]
    else:
        assert target.read_bytes().startswith(b"PAR1")
