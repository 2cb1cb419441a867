"""[J] The query sandbox's bounds: one operator query cannot pin the controller's CPU or eat its
memory. Capped memory and threads (settings a query cannot change), a wall-clock limit that
interrupts the query, a row cap per page and a byte cap per page, each with one clear error,
and the controller writing on meanwhile."""

from __future__ import annotations

import threading

import duckdb
import pytest
from rentwatch.ledger import Ledger
from rentwatch.ledger.readonly import (
    MAX_ROW_LIMIT,
    QUERY_MEMORY_LIMIT,
    QUERY_THREADS,
    QueryFailed,
    QueryTooBig,
)

CROSS = "SELECT count(*) FROM range(1e12::BIGINT) a, range(1e12::BIGINT) b"  # the issue's
SPIN = "SELECT count(*) FROM range(1e13::BIGINT) WHERE hash(range) = 1"  # CPU only, no memory


@pytest.fixture(params=[False, True], ids=["controller", "file"])
def led(request, tmp_path):
    path = tmp_path / "l.duckdb"
    w = Ledger(path)
    for i in range(5):
        w.record("note", at=i, actor="engine", reason=f"note {i}", campaign="c")
    if request.param:
        w.close()
        w = Ledger(path, read_only=True)
    yield w
    w.close()


def test_memory_and_threads_are_capped_and_locked(led):
    got = dict(led.query("select name, value from duckdb_settings()").rows)
    assert got["threads"] == str(QUERY_THREADS)
    plain = duckdb.connect(":memory:", config={"memory_limit": QUERY_MEMORY_LIMIT})
    capped = plain.execute("select current_setting('memory_limit')").fetchone()
    plain.close()
    assert capped is not None and got["memory_limit"] == capped[0]  # not DuckDB's 80% of RAM
    assert got["max_temp_directory_size"].startswith("0")


def _bounded(led: Ledger, sql: str, timeout_s: float) -> BaseException | None:
    """Run `sql` in a thread; what it raised. A query still running 10 s later fails the test
    (and is interrupted, so a removed bound fails rather than hangs)."""
    got: list[BaseException | None] = []

    def go() -> None:
        try:
            led.query(sql, timeout_s=timeout_s)
            got.append(None)
        except BaseException as exc:
            got.append(exc)

    t = threading.Thread(target=go)
    t.start()
    t.join(10)
    if t.is_alive():
        led.interrupt()
        t.join(10)
        pytest.fail(f"still running 10 s later: {sql}")
    return got[0]


def test_a_query_past_its_time_is_stopped_with_one_clear_error(led):
    exc = _bounded(led, SPIN, 0.5)
    assert isinstance(exc, QueryTooBig) and "ran past 0.5 s" in str(exc)
    # the issue's: past its time, or past the memory limit first; stopped either way
    assert isinstance(_bounded(led, CROSS, 2), QueryTooBig)
    # the default applies to every caller (ledger screen, `rentwatch ledger`, the API)
    assert led.query("select count(*) from events").rows[0][0] == 5


def test_a_query_past_the_memory_limit_is_stopped_with_one_clear_error(led):
    with pytest.raises(QueryTooBig, match="memory"):
        led.query("SELECT string_agg(repeat('x', 10000), ',') FROM range(150000)")  # 1.5 GB


def test_a_page_is_capped_in_rows_and_a_huge_answer_streams(led):
    # only the page is computed: the whole answer would run for days, so it would be stopped
    # at its time limit (QueryTooBig), not answered; the limit is a ceiling a loaded box's
    # page never nears (at the default 20 s, a starved test process could meet it)
    res = led.query("SELECT * FROM range(1e12::BIGINT)", limit=10**9, timeout_s=300)
    assert len(res.rows) == MAX_ROW_LIMIT and res.truncated


def test_a_page_is_capped_in_bytes(led, monkeypatch):
    import rentwatch.ledger.readonly as ro

    monkeypatch.setattr(ro, "MAX_PAGE_BYTES", 1 << 20)
    with pytest.raises(QueryTooBig, match="MB of text"):
        led.query("SELECT repeat('x', 100000) FROM range(20)")
    assert isinstance(QueryTooBig("x"), QueryFailed)  # every caller already shows QueryFailed


def test_the_byte_bound_stops_the_fetch_before_the_page_is_in_memory(led, monkeypatch):
    """The rows come into Python a chunk at a time and the bound is checked as they come: a page
    of 100,000 rows of 1 kB is not held (100 MB, outside DuckDB's memory_limit) before the 1 MB
    bound refuses it; nor are the rows skipped to reach an offset held all at once."""
    import tracemalloc

    import rentwatch.ledger.readonly as ro

    monkeypatch.setattr(ro, "MAX_PAGE_BYTES", 1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(QueryTooBig, match="MB of text"):
            led.query("SELECT repeat('x', 1000) FROM range(100000)", limit=MAX_ROW_LIMIT)
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 16 << 20
        tracemalloc.reset_peak()
        res = led.query("SELECT repeat('x', 1000) FROM range(100001)", offset=100_000)
        _, peak = tracemalloc.get_traced_memory()
        assert len(res.rows) == 1 and not res.truncated and res.offset == 100_000
        assert peak < 16 << 20
    finally:
        tracemalloc.stop()


def test_rentwatch_ledger_says_one_line(tmp_path, capsys):
    from rentwatch.cli.main import main

    path = tmp_path / "l.duckdb"
    Ledger(path).close()
    code = main(["ledger", "--ledger", str(path), CROSS])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "stopped" in err
