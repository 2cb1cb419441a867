"""The receipt of several campaigns at once is each campaign's receipt alone (it is read in one
pass over the ledger's views: per campaign, 20 campaigns of a million events took 23 s), and a
bid rental stays on the interruptible tier under the campaign that reuses it (Vast's rental
type is set at the create)."""

from __future__ import annotations

import duckdb
import pytest
from rentwatch.ledger import Ledger


def _create(led: Ledger, iid: int, camp: str, bid: float | None) -> None:
    s = led.intent(
        "create", at=0, actor="rule:replace", reason="fleet short", campaign=camp,
        machine_id=iid + 100, offer_id=iid + 5000, gpu_dph=0.5, storage_dph=0.01,
        gpu_name="RTX 4090",
    )  # fmt: skip
    detail = {"gpu_billing": "created", **({"bid": bid} if bid is not None else {})}
    led.outcome(s, at=0, ok=True, instance_id=iid, detail=detail)


def _row(led: Ledger, kind: str, at: float, iid: int, camp: str, **kw) -> None:
    led.record(kind, at=at, actor="engine", reason=kind, instance_id=iid, campaign=camp, **kw)


def test_each_campaign_reads_the_same_alone_and_among_others(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    _create(led, 7, "a", bid=0.3)
    _create(led, 8, "a", bid=None)
    _row(led, "preflight_passed", 60, 7, "a")
    _row(led, "outbid", 900, 7, "a", detail={"work_lost_s": 120.0})
    d = {"job": "fit", "exit_code": 0, "work_ref_h": 0.5}
    _row(led, "job_finished", 1200, 8, "a", ok=True, detail=d)
    s = led.intent("stop", at=1800, actor="rule:campaign_end", reason="end", campaign="a",
                   instance_id=7)  # fmt: skip
    led.outcome(s, at=1800, ok=True, instance_id=7)
    s = led.intent("start", at=3600, actor="rule:reuse", reason="reuse", campaign="b",
                   instance_id=7)  # fmt: skip
    led.outcome(s, at=3600, ok=True, instance_id=7)
    _row(led, "job_finished", 5400, 7, "b", ok=True, detail=d | {"job": "eval"})
    led.tick(7200)
    together = {r["campaign"]: r for r in led.receipt()}
    assert set(together) == {"a", "b"}
    for camp in ("a", "b"):
        (alone,) = led.receipt(camp)
        assert alone == together[camp]
    a, b = together["a"], together["b"]
    assert a["interruptions"] == 1 and a["work_lost_interrupt_min"] == 2.0
    assert a["usd_interruptible"] > 0 and a["usd_on_demand"] > 0
    assert b["usd_on_demand"] == 0 and b["usd_interruptible"] == round(b["total_usd"], 6) > 0
    assert (a["jobs_finished"], b["jobs_finished"]) == (1, 1)
    assert (a["work_done"], b["work_done"]) == (0.5, 0.5)


def test_a_ledger_an_older_rentwatch_wrote_reads_its_receipt_read_only(tmp_path):
    # the receipt asks `tenures` for columns an older rentwatch's view lacks; opened read-only
    # (`rentwatch receipt --ledger FILE`), the file's views cannot be rewritten
    path = tmp_path / "old.duckdb"
    with Ledger(path) as led:
        s = led.intent("create", at=0, actor="rule:replace", reason="r", campaign="c", gpu_dph=0.2)
        led.outcome(s, at=0, ok=True, instance_id=1)
        led.record("note", at=3600, actor="engine", reason="clock", campaign="c")
    con = duckdb.connect(str(path))  # the view as an older rentwatch left it
    con.execute("ALTER VIEW tenures RENAME TO tenures_now")
    con.execute("CREATE VIEW tenures AS SELECT * EXCLUDE (gpu_usd, gpu_billed_h) FROM tenures_now")
    con.close()
    with Ledger(path, read_only=True) as led:
        [r] = led.receipt("c")
    assert r["creates"] == 1 and r["total_usd"] == pytest.approx(0.2)
