"""What each poll asks of the ledger, kept to what changed: the clock's tick is one write (none
when the clock stands), and the alerts read the events only once the ledger stored new ones,
never skipping an event a failed write left waiting."""

from __future__ import annotations

from types import SimpleNamespace

import duckdb
import pytest
from rentwatch.ledger import EventKind, Ledger
from rentwatch.run import alerts as alerts_mod
from rentwatch.run.alerts import Alerts

K = EventKind


class CountingCon:
    """The ledger's connection, counting the statements it is given."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.statements: list[str] = []

    def execute(self, sql: str, *args: object) -> duckdb.DuckDBPyConnection:
        self.statements.append(sql)
        return self.con.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self.con, name)


def test_a_tick_is_one_statement_and_a_standing_clock_writes_nothing(tmp_path):
    with Ledger(tmp_path / "l.duckdb") as led:
        counting = CountingCon(led._Ledger__con)
        led._Ledger__con = counting
        led.tick(100.0, "http://market")
        assert len(counting.statements) == 1
        rows = dict(led._rows("SELECT key, value FROM meta WHERE key LIKE 'clock%'"))
        assert rows == {"clock": "100.0", "clock@http://market": "100.0"}
        counting.statements.clear()
        led.tick(100.0, "http://market")
        assert counting.statements == []
        led.tick(110.0, "http://market")
        # the rows it wrote already are updated, not upserted again (half the CPU)
        assert counting.statements[-1].startswith("UPDATE")
        led.tick(110.0)  # another market's clock is not this one
        assert len(counting.statements) == 2
        rows = dict(led._rows("SELECT key, value FROM meta WHERE key LIKE 'clock%'"))
        assert rows == {"clock": "110.0", "clock@http://market": "110.0"}
        led.tick(120.0)
        assert counting.statements[-1].startswith("UPDATE")
        rows = dict(led._rows("SELECT key, value FROM meta WHERE key LIKE 'clock%'"))
        assert rows == {"clock": "120.0", "clock@http://market": "110.0"}


class Sent(list):
    def notify(self, notice: object) -> None:
        self.append(notice)


@pytest.fixture
def watched(tmp_path, monkeypatch):
    """Alerts on a ledger, with a supervisor that has nothing to say but its campaign."""
    view = SimpleNamespace(spent_usd=0.0, instances=[], creates=0, duds=0)
    monkeypatch.setattr(alerts_mod, "snapshot", lambda sup, now: view)
    sup = SimpleNamespace(
        campaign=SimpleNamespace(name="c", budget_usd=0.0),
        before_poll=[],
        listeners=[],
        job_work=SimpleNamespace(queue=SimpleNamespace(jobs=[])),
        now=lambda: 0.0,
    )
    with Ledger(tmp_path / "l.duckdb") as led:
        sent = Sent()
        alerts = Alerts(sup, led, notifier=sent).attach()  # type: ignore[arg-type]
        reads: list[str] = []
        events = led.events

        def counted(where: str = "true", params=()):
            reads.append(where)
            return events(where, params)

        monkeypatch.setattr(led, "events", counted)
        yield led, alerts, sent, reads


def test_a_poll_after_nothing_was_written_reads_no_events(watched):
    led, alerts, sent, reads = watched
    led.record(K.NOTE, at=1.0, actor="engine", reason="not news", campaign="c")
    alerts._after_poll()
    assert len(reads) == 2  # the news and the acts since the last poll
    reads.clear()
    alerts._after_poll()  # the note is behind us: nothing to ask
    assert reads == []
    led.record(K.CAMPAIGN_FAULT, at=2.0, actor="engine", reason="bad image", campaign="c")
    alerts._after_poll()
    assert len(reads) == 2 and len(sent) == 1
    reads.clear()
    alerts._after_poll()
    assert reads == [] and len(sent) == 1


def test_an_event_a_failed_write_left_waiting_is_still_news(watched, monkeypatch):
    led, alerts, sent, _ = watched
    insert = led._insert

    def full_disk(row):
        raise duckdb.IOException("No space left on device")

    monkeypatch.setattr(led, "_insert", full_disk)
    seq = led.record(K.CAMPAIGN_FAULT, at=1.0, actor="engine", reason="bad image", campaign="c")
    led.record(K.NOTE, at=1.0, actor="engine", reason="after it", campaign="c")
    assert led.stored_through() == seq - 1
    alerts._after_poll()
    assert sent == []
    monkeypatch.setattr(led, "_insert", insert)
    assert led.flush() == 0 and led.stored_through() == seq + 1
    alerts._after_poll()
    assert len(sent) == 1


def test_the_ends_release_counts_what_came_after_the_last_poll(watched):
    led, alerts, _, _ = watched
    for iid, kind in ((1, K.STOP), (2, K.DESTROY)):
        intent = led.intent(
            kind, at=1.0, actor="engine", reason="end", campaign="c", instance_id=iid
        )
        led.outcome(intent, at=1.0, ok=True)
    alerts._after_poll()
    assert alerts.released() == (0, 0)  # stopped before the last poll: not the end's
    led.record(K.NOTE, at=2.0, actor="engine", reason="nothing", campaign="c")
    alerts._after_poll()
    intent = led.intent(K.STOP, at=3.0, actor="engine", reason="end", campaign="c", instance_id=3)
    led.outcome(intent, at=3.0, ok=True)
    assert alerts.released() == (1, 0)


def test_a_poll_with_no_one_listening_reads_nothing_and_takes_no_snapshot(watched, monkeypatch):
    """A run with no notifier and no metrics (every referee-less headless run in the tests, and
    any run without `notify` or `--metrics`) has no one to tell: a poll's reads and fleet
    snapshot would be CPU spent for nothing."""
    led, alerts, _, reads = watched
    taken: list[float] = []
    monkeypatch.setattr(alerts_mod, "snapshot", lambda sup, now: taken.append(now))
    alerts.notifier = None
    led.record(K.CAMPAIGN_FAULT, at=1.0, actor="engine", reason="bad image", campaign="c")
    alerts._after_poll()
    assert reads == [] and taken == []
