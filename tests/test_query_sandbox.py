"""The query sandbox: the operator's SQL cannot write the ledger, read the machine or reach the
network, both through a controller's own ledger (open for writing) and through `rentwatch
ledger` on a file; long queries are cancelled without stopping the controller's writes."""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest
from rentwatch.ledger import Ledger
from rentwatch.ledger.readonly import QueryFailed, QueryRefused, check_read_only

SECRET = "sk-sandbox-test-0123456789"


def _attacks(tmp) -> list[str]:
    """The issue's list, each one a way the old query path wrote, read or downloaded."""
    out = tmp / "leak.csv"
    key = tmp / "vast_api_key"
    key.write_text(SECRET)
    return [
        "EXPLAIN ANALYZE DELETE FROM events",
        "explain /* hi */ analyse delete from events",
        "EXPLAIN (ANALYZE) DELETE FROM events",
        "EXPLAIN (FORMAT json, ANALYZE true) DELETE FROM events",
        "EXPLAIN ANALYZE SELECT 1",
        f"EXPLAIN ANALYZE COPY (SELECT * FROM events) TO '{out}'",
        f"COPY (SELECT * FROM events) TO '{out}'",
        "EXPLAIN DELETE FROM events",
        "UPDATE events SET reason = 'x'",
        "DELETE FROM events",
        "CREATE TABLE t AS SELECT 1",
        "DROP VIEW receipt",
        "INSERT INTO events (seq) VALUES (99)",
        "SET enable_external_access = true",
        "RESET lock_configuration",
        "PRAGMA enable_external_access",
        "INSTALL sqlite",
        "LOAD sqlite",
        f"ATTACH '{tmp / 'other.duckdb'}' AS o",
        "CHECKPOINT",
        "select * from query('delete from events')",
        "select * from read_text('/etc/passwd')",
        f"select * from read_text('{key}')",
        f"select * from read_blob('{key}')",
        f"select * from read_csv('{key}')",
        f"select * from '{key}'",
        "select * from read_text('/proc/self/environ')",
        "select * from glob('/etc/*')",
        f"select * from glob('{tmp}/*')",
        "select * from 'http://127.0.0.1:9/x.csv'",
        "select * from read_parquet('https://example.com/x.parquet')",
        f"select * from sqlite_scan('{tmp / 'x.sqlite'}', 't')",
        "select * from duckdb_secrets()",
        "select 1; delete from events",
        "select * from checkpoint()",
        'select * from "FORCE_CHECKPOINT"()',
        # the temp folder beside the ledger is the one place DuckDB allows: no way out of it
        f"select * from read_text('{tmp}/l.duckdb.tmp/../vast_api_key')",
        f"select * from read_text('{tmp}/l.duckdb.tmp/x/../../../../etc/passwd')",
    ]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _filled(path) -> Ledger:
    led = Ledger(path)
    for i in range(20):
        led.record("note", at=i, actor="engine", reason=f"note {i}", campaign="c")
    return led


def _refused(led: Ledger, sql: str) -> str:
    try:
        res = led.query(sql, limit=50)
    except (QueryRefused, QueryFailed) as exc:
        return str(exc)
    raise AssertionError(f"ran: {sql!r} -> {res.rows[:3]}")


def test_controller_ledger_refuses_every_attack(tmp_path, monkeypatch):
    """In the controller's process: the ledger is open for writing and stays writable, yet no
    operator query writes it or reads anything outside it."""
    monkeypatch.setenv("VAST_API_KEY", SECRET)
    led = _filled(tmp_path / "l.duckdb")
    check = "select count(*), max(seq), sum(hash(reason)), count(distinct kind) from events"
    before = led.query(check).rows
    views = led.query("select count(*) from duckdb_views() where not internal").rows
    files = sorted(os.listdir(tmp_path))
    for sql in _attacks(tmp_path):
        msg = _refused(led, sql)
        assert SECRET not in msg
    assert led.query(check).rows == before
    assert led.query("select count(*) from duckdb_views() where not internal").rows == views
    assert sorted(os.listdir(tmp_path)) == sorted(files + ["vast_api_key"])
    # the controller's own appends still work after all that
    led.record("note", at=99, actor="engine", reason="still writable")
    assert led.query("select count(*) from events").rows[0][0] == 21
    led.close()


def test_cli_on_a_file_refuses_every_attack(tmp_path, capsys):
    from rentwatch.cli.main import main

    path = tmp_path / "l.duckdb"
    _filled(path).close()
    attacks = _attacks(tmp_path)
    before = _digest(path)
    files = sorted(os.listdir(tmp_path))
    for sql in attacks:
        assert main(["ledger", "--ledger", str(path), sql]) == 2, sql
    out = capsys.readouterr()
    assert SECRET not in out.out + out.err and "root:" not in out.out + out.err
    assert "Traceback" not in out.err
    assert _digest(path) == before
    assert sorted(os.listdir(tmp_path)) == files


@pytest.mark.parametrize(
    "sql",
    [
        "select * from events",
        "with x as (select seq from events) select * from x",
        "values (1, 'a')",
        "from events",
        "explain select * from events",
        "EXPLAIN (FORMAT json) select 1",
        "-- a comment\nselect 1",
        "describe events",
        "summarize events",
    ],
)
def test_plain_reads_are_admitted(tmp_path, sql):
    check_read_only(sql)
    led = _filled(tmp_path / "l.duckdb")
    assert led.query(sql).columns
    led.close()


def test_paged_results(tmp_path):
    led = _filled(tmp_path / "l.duckdb")
    first = led.query("select seq from events order by seq", limit=8)
    second = led.query("select seq from events order by seq", limit=8, offset=8)
    last = led.query("select seq from events order by seq", limit=8, offset=16)
    assert [r[0] for r in first.rows] == list(range(1, 9)) and first.truncated
    assert [r[0] for r in second.rows] == list(range(9, 17)) and second.offset == 8
    assert [r[0] for r in last.rows] == [17, 18, 19, 20] and not last.truncated
    led.close()


def test_a_long_query_is_cancelled_and_never_blocks_the_controller(tmp_path):
    led = _filled(tmp_path / "l.duckdb")
    errors: list[BaseException] = []
    slow = "select count(*) from range(1000000000) a, range(1000) b where a.range + b.range < 0"

    def run() -> None:
        try:
            led.query(slow)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.5)
    # the controller appends while the operator's query runs: it must not wait for it
    writer = threading.Thread(
        target=led.record, args=("note",), kwargs={"at": 100, "actor": "engine", "reason": "w"}
    )
    writer.start()
    writer.join(2.0)
    blocked = writer.is_alive()
    led.interrupt()
    writer.join(10)
    assert not blocked, "an operator query held up the controller's append"
    t.join(10)
    assert not t.is_alive()
    assert errors and isinstance(errors[0], QueryFailed)
    assert led.query("select count(*) from events").rows[0][0] == 21
    led.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_the_walls_behind_the_parser_hold_on_their_own(tmp_path, monkeypatch, read_only):
    """With the parser check switched off, the read-only transaction still refuses writes and
    the locked, closed configuration still refuses settings and files: each wall holds alone."""
    import rentwatch.ledger.readonly as ro

    path = tmp_path / "l.duckdb"
    _filled(path).close()
    led = Ledger(path, read_only=read_only)
    settings = dict(led.query("select name, value from duckdb_settings()").rows)
    expected = {
        "enable_external_access": "false",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
        "allow_community_extensions": "false",
        "allow_unsigned_extensions": "false",
        "lock_configuration": "true",
    }
    assert {k: settings[k].lower() for k in expected} == expected
    monkeypatch.setattr(ro, "check_read_only", lambda sql: sql)
    (tmp_path / "secret").write_text(SECRET)
    for sql in [
        "DELETE FROM events",
        "CREATE TABLE t (a INT)",
        "SET threads = 1",
        "SET allowed_directories = ['/']",
        f"select * from read_text('{tmp_path / 'secret'}')",
        f"COPY events TO '{tmp_path / 'x.csv'}'",
    ]:
        with pytest.raises(QueryFailed):
            led.query(sql)
    assert not (tmp_path / "x.csv").exists()
    led.close()
    led = Ledger(path, read_only=True)
    assert led.query("select count(*) from events").rows[0][0] == 20
    led.close()
