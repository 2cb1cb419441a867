"""The ledger: append-only, durable across kill -9, migrates, bills like the pure function,
computes the receipt, and refuses every mutation through the query path."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rentwatch.core.billing import Mark, charges, status_marks, took_effect_at
from rentwatch.ledger import Ledger, LedgerError
from rentwatch.ledger.readonly import QueryFailed, QueryRefused
from rentwatch.ledger.schema import V1_TABLES

from tests.fuzzing import examples

from .ledgers import new_ledger


def _create(
    led: Ledger,
    iid: int,
    at: float,
    gpu: float,
    storage: float,
    campaign: str = "c",
    machine: int = 1,
    mode: str = "created",
) -> None:
    s = led.intent(
        "create",
        at=at,
        actor="rule:replace",
        reason="fleet short by one",
        campaign=campaign,
        machine_id=machine,
        offer_id=iid + 5000,
        gpu_dph=gpu,
        storage_dph=storage,
        gpu_name="RTX 3090",
    )
    led.outcome(s, at=at, ok=True, instance_id=iid, detail={"gpu_billing": mode})


def _act(
    led: Ledger, kind: str, iid: int, at: float, actor: str = "rule:test", ok: bool = True
) -> None:
    s = led.intent(kind, at=at, actor=actor, reason=f"{kind} it", instance_id=iid, campaign="c")
    led.outcome(s, at=at, ok=ok, error=None if ok else "boom")


def test_append_only_public_api(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    public = [n for n in dir(led) if not n.startswith("_")]
    assert not [
        n
        for n in public
        if any(w in n.lower() for w in ("update", "delete", "execute", "con", "sql"))
    ]
    with pytest.raises(QueryRefused):
        led.query("DELETE FROM events")
    with pytest.raises(LedgerError):
        led.record("teleport", at=0, actor="human", reason="x")
    assert oct(os.stat(tmp_path / "l.duckdb").st_mode & 0o777) == "0o600"


def test_intent_outcome_and_unfinished(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    s = led.intent(
        "stop", at=5, actor="rule:idle", reason="idle 12 min", instance_id=9, campaign="c"
    )
    assert [e.seq for e in led.unfinished_intents()] == [s]
    # the tries written as they go out leave the intent open: only an outcome closes it
    led.record("sent", at=5.1, actor="rule:idle", reason="request sent", intent_seq=s)
    assert [e.seq for e in led.unfinished_intents()] == [s]
    o = led.outcome(s, at=6, ok=False, error="429 twice")
    ev = led.event(o)
    assert ev.phase == "outcome" and ev.ok is False and ev.intent_seq == s and ev.instance_id == 9
    assert "429" in ev.detail["error"] and led.unfinished_intents() == []
    assert o > s


@pytest.mark.parametrize(
    ("tries", "expected"),
    [
        ([], 100.0),  # the crash came before the first try went out
        ([(101.0, None)], 101.0),  # one try, its answer cut off by the crash
        ([(101.0, None), (105.0, "refused"), (112.0, "refused")], 112.0),
        ([(101.0, None), (105.0, "lost")], 101.0),  # the lost one did it; the next found it done
        ([(101.0, None), (105.0, "refused"), (109.0, "lost"), (120.0, "refused")], 105.0),
    ],
)
def test_a_cut_short_change_is_dated_by_its_tries(tries, expected):
    assert took_effect_at(100.0, tries) == expected


def test_hand_computed_receipt(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    # a freeze dud: 12 minutes at $0.30/h + $0.01/h storage
    _create(led, 1, 0, 0.30, 0.01, machine=11)
    led.record(
        "abandon",
        at=700,
        actor="rule:freeze",
        reason="frozen 6m",
        instance_id=1,
        campaign="c",
        detail={"class": "freeze"},
    )
    _act(led, "destroy", 1, 720)
    # a fatal dud: 3 minutes at $0.60/h
    _create(led, 2, 100, 0.60, 0.02, machine=12)
    led.record(
        "abandon",
        at=280,
        actor="rule:fatal",
        reason="manifest not found",
        instance_id=2,
        campaign="c",
        detail={"class": "fatal"},
    )
    _act(led, "destroy", 2, 280)
    # a good one: running at 600, verified at 660, stopped at 4260 (1 h delivered), destroyed at 7860
    _create(led, 3, 0, 0.20, 0.01, machine=13)
    led.record(
        "status",
        at=600,
        actor="engine",
        reason="running",
        instance_id=3,
        campaign="c",
        detail={"status": "running"},
    )
    led.record(
        "preflight_passed", at=660, actor="engine", reason="61 TFLOP/s", instance_id=3, campaign="c"
    )
    led.record(
        "job_finished",
        at=4000,
        actor="engine",
        reason="exit 0",
        instance_id=3,
        campaign="c",
        ok=True,
    )
    led.record(
        "throttle",
        at=4100,
        actor="engine",
        reason="SM clock 22% below max",
        instance_id=3,
        campaign="c",
        machine_id=13,
    )
    _act(led, "stop", 3, 4260)
    _act(led, "destroy", 3, 7860, actor="human")
    [r] = led.receipt()
    dud1 = 720 / 3600 * 0.31
    dud2 = 180 / 3600 * 0.62
    good = 4260 / 3600 * 0.20 + 7860 / 3600 * 0.01
    assert r["creates"] == 3 and r["duds"] == 2 and r["verified"] == 1 and r["jobs_finished"] == 1
    assert r["dud_share"] == pytest.approx(2 / 3)
    assert r["dud_usd"] == pytest.approx(dud1 + dud2)
    assert r["dud_mean_lifetime_min"] == pytest.approx((12 + 3) / 2)
    assert r["gpu_hours"] == pytest.approx(1.0)
    assert r["total_usd"] == pytest.approx(dud1 + dud2 + good)
    assert r["usd_per_gpu_hour"] == pytest.approx(dud1 + dud2 + good)
    assert r["by_class"] == {"freeze": 1, "fatal": 1}
    hosts = {row["machine_id"]: row for row in led.query("select * from hosts").as_dicts()}
    assert hosts[13]["computed"] == 1 and hosts[13]["finished"] == 1 and hosts[11]["duds"] == 1
    assert hosts[13]["throttled"] == 1 and hosts[11]["throttled"] == 0


_kinds = st.sampled_from(["running", "halt", "offline", "stop", "start", "unread", "read"])
_STATUS = {"running": "running", "halt": "exited", "offline": "offline"}


@settings(max_examples=examples(150), deadline=None)
@given(
    st.lists(st.tuples(_kinds, st.integers(1, 5000)), max_size=12),
    st.sampled_from(["created", "running"]),
    st.booleans(),
    st.floats(0.01, 5),
    st.floats(0.0, 0.1),
)
def test_sql_billing_equals_pure_function(steps, mode, destroy, gpu, storage):
    led = new_ledger()
    _create(led, 1, 0, gpu, storage, mode=mode)
    marks = [Mark(0, "create", gpu, storage)]
    t = 0
    for kind, gap in steps:
        t += gap
        if kind in _STATUS:
            status = _STATUS[kind]
            led.record(
                "status",
                at=t,
                actor="engine",
                reason=kind,
                instance_id=1,
                detail={"status": status},
            )
            marks += status_marks(t, status)
            continue
        if kind in ("unread", "read"):  # a spell of unreadable rows: billed its worst case
            event = "unread" if kind == "unread" else "read_again"
            led.record(event, at=t, actor="engine", reason=kind, instance_id=1)
        else:
            _act(led, kind, 1, t)
        marks.append(Mark(t, kind))
    t += 100
    if destroy:
        _act(led, "destroy", 1, t)
        marks.append(Mark(t, "destroy"))
    else:
        led.record("note", at=t, actor="engine", reason="clock", campaign="c")
    expect = charges(marks, mode, now=t)
    [row] = led.instance_rows()
    assert row["gpu_usd"] == pytest.approx(expect.gpu_usd, abs=1e-9)
    assert row["storage_usd"] == pytest.approx(expect.storage_usd, abs=1e-9)
    led.close()


MUTATIONS = [
    "DELETE FROM events",
    "delete from events where seq = 1",
    "UPDATE events SET ok = false",
    "INSERT INTO events (seq, ts, actor, kind, phase) VALUES (99, 0, 'human', 'note', 'fact')",
    "DROP TABLE events",
    "DROP VIEW receipt",
    "ALTER TABLE events ADD COLUMN x INT",
    "ALTER TABLE events RENAME TO e2",
    "CREATE TABLE x (a INT)",
    "CREATE VIEW v AS SELECT 1",
    "CREATE OR REPLACE VIEW receipt AS SELECT 1",
    "CREATE MACRO m(a) AS a",
    "ATTACH 'other.db' AS o",
    "DETACH o",
    "COPY events TO 'out.csv'",
    "COPY events FROM 'in.csv'",
    "EXPORT DATABASE 'dir'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "SET threads = 1",
    "RESET threads",
    "PRAGMA enable_profiling",
    "PRAGMA disable_checkpoint_on_shutdown",
    "SELECT 1; DELETE FROM events",
    "select 1;drop table events",
    "SELECT 1; SELECT 2",
    "VACUUM",
    "CHECKPOINT",
    "BEGIN TRANSACTION",
    "COMMIT",
    "ROLLBACK",
    "CALL pragma_version()",
    "PREPARE p AS DELETE FROM events",
    "EXECUTE p",
    "/* comment */ DELETE FROM events",
    "-- hi\nDELETE FROM events",
    "  dElEtE   FROM events  ",
    "WITH x AS (SELECT 1) DELETE FROM events",
    "WITH x AS (SELECT 1) UPDATE events SET ok = true",
    "INSERT INTO events SELECT * FROM events",
    "TRUNCATE events",
    "CREATE SEQUENCE s",
    "USE memory",
    "SET VARIABLE x = 1",
    "DROP SCHEMA main CASCADE",
    "ANALYZE",
    "UPDATE meta SET value = '9'",
    "DELETE FROM samples",
    "INSERT OR REPLACE INTO meta VALUES ('a','b')",
    "COPY (SELECT 1) TO '/tmp/rentwatch-x.csv'",
    "MERGE INTO events USING events AS s ON true WHEN MATCHED THEN DELETE",
]


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fifty_mutations_refused_through_the_cli(tmp_path):
    path = tmp_path / "l.duckdb"
    led = Ledger(path)
    _create(led, 1, 0, 0.3, 0.01)
    led.close()
    before = _digest(path)
    assert len(MUTATIONS) >= 50
    # the CLI opens read-only and parses first: all refused, in one process for speed
    from rentwatch.cli.main import main

    for sql in MUTATIONS:
        rc = main(["ledger", "--ledger", str(path), sql])
        assert rc != 0, sql
    assert _digest(path) == before
    assert main(["ledger", "--ledger", str(path), "--json", "select count(*) n from events"]) == 0
    assert _digest(path) == before


def test_query_errors_and_row_limit(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    for i in range(30):
        led.record("note", at=i, actor="engine", reason=f"n{i}")
    with pytest.raises(QueryFailed):
        led.query("SELECT nope FROM events")
    with pytest.raises(QueryFailed):
        led.query("SELEC 1")
    res = led.query("select seq from events", limit=10)
    assert len(res.rows) == 10 and res.truncated
    assert not led.query("select seq from events", limit=30).truncated


def test_export_csv_and_parquet(tmp_path):
    from rentwatch.ledger.export import export_result

    led = Ledger(tmp_path / "l.duckdb")
    led.record("note", at=1, actor="engine", reason='a,b "quoted"')
    res = led.query("select seq, reason from events")
    export_result(res, str(tmp_path / "r.csv"))
    export_result(res, str(tmp_path / "r.parquet"))
    # RFC 4180: fields with a comma or a quote quoted, quotes doubled, CRLF line ends
    assert (tmp_path / "r.csv").read_bytes() == b'seq,reason\r\n1,"a,b ""quoted"""\r\n'
    rows = duckdb.connect().execute(f"select * from '{tmp_path / 'r.parquet'}'").fetchall()
    assert rows == [("1", 'a,b "quoted"')]


def test_old_ledger_migrates(tmp_path):
    path = tmp_path / "old.duckdb"
    con = duckdb.connect(str(path))
    con.execute(V1_TABLES)
    con.execute(
        "INSERT INTO events (seq, ts, actor, kind, phase, ok, reason, detail) "
        "VALUES (1, 10, 'human', 'note', 'fact', NULL, 'from v1', '{}')"
    )
    con.close()
    led = Ledger(path)
    assert led.schema_version() == 2
    assert led.events()[0].reason == "from v1"
    assert led.record("note", at=11, actor="engine", reason="v2") == 2


WRITER = r"""
import sys
from rentwatch.ledger import Ledger
led = Ledger(sys.argv[1])
i = 0
while True:
    seq = led.record("note", at=i, actor="engine", reason=f"burst {i}", detail={"i": i})
    print(seq, flush=True)
    i += 1
"""


def test_kill_dash_nine_keeps_every_acknowledged_event(tmp_path):
    path = tmp_path / "l.duckdb"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    acked = []
    deadline = time.time() + 20
    while len(acked) < 300 and time.time() < deadline:
        acked.append(int(proc.stdout.readline()))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    led = Ledger(path)
    have = {e.seq for e in led.events()}
    assert set(acked) <= have
    assert json.loads(json.dumps(led.events()[0].detail)) == {"i": 0}
