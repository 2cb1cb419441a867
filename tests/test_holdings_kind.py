"""`rentwatch end` and the end dialog list what each held rental still has of a job's output;
a pull tells its kind (artifacts or checkpoint) in its row, so a job named like a checkpoint
whose output came off is not listed as "outputs NOT pulled off" (found by an outsider: the
check read the destination folder's name, `%checkpoint`), and a job whose output came off
another host after a try of it died here is not listed here. Rows as the engine writes them."""

from __future__ import annotations

from rentwatch.ledger import Ledger
from rentwatch.ledger.holdings import Holding, holdings_sql

C = "camp"


def _create(led: Ledger, iid: int) -> None:
    s = led.intent(
        "create", at=0, actor="rule:replace", reason="fleet short", campaign=C,
        machine_id=iid + 100, offer_id=iid + 5000, gpu_dph=0.5, storage_dph=0.01,
        gpu_name="RTX 4090",
    )  # fmt: skip
    led.outcome(s, at=0, ok=True, instance_id=iid, detail={"gpu_billing": "created"})
    led.record("preflight_passed", at=120, actor="engine", reason="ok", instance_id=iid, campaign=C)


def _job(led: Ledger, iid: int, job: str, pulls: list[tuple[bool, str]]) -> None:
    led.record(
        "job_started", at=200, actor="engine", reason=f"job {job}", instance_id=iid,
        campaign=C, detail={"job": job, "attempt": 1, "run": "x", "artifacts": ["out/"]},
    )  # fmt: skip
    led.record(
        "job_finished", at=4000, actor="engine", ok=True, reason=f"job {job} exited 0",
        instance_id=iid, campaign=C, detail={"job": job, "exit_code": 0, "attempt": 1},
    )  # fmt: skip
    for k, (ok, kind) in enumerate(pulls):
        detail: dict = {"job": job, "kind": kind}
        if ok:
            detail["files"] = [{"path": "out/r.json", "bytes": 1, "sha256": "0" * 64}]
            detail["dest"] = f"/art/{C}/{job}" + ("/checkpoint" if kind == "checkpoint" else "")
        led.record(
            "artifacts", at=4010 + k, actor="engine", ok=ok, reason=f"artifacts of {job}",
            instance_id=iid, campaign=C, detail=detail,
        )  # fmt: skip


def _unpulled(led: Ledger) -> dict[int, str]:
    got = led.query(holdings_sql(C))
    rows = (Holding.from_row(dict(zip(got.columns, r, strict=True))) for r in got.rows)
    return {h.instance_id: h.unpulled for h in rows}


def test_a_job_named_like_a_checkpoint_whose_output_came_off_is_not_listed(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    _create(led, 7)
    _job(led, 7, "save-checkpoint", [(False, "artifacts"), (True, "artifacts")])
    assert _unpulled(led)[7] == ""


def test_a_job_whose_checkpoint_alone_came_off_is_listed(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    _create(led, 7)
    _job(led, 7, "fit", [(True, "checkpoint"), (False, "artifacts")])
    assert _unpulled(led)[7] == "fit"


def test_a_try_cut_off_here_whose_retry_elsewhere_was_pulled_is_not_listed(tmp_path):
    """Found by a newcomer: `rentwatch end` listed the host where try 1 of lora-r16 died
    (offline) as holding its outputs, though try 2 finished on another host and was pulled."""
    led = Ledger(tmp_path / "l.duckdb")
    _create(led, 7)
    _create(led, 8)
    led.record(
        "job_started", at=200, actor="engine", reason="job lora-r16", instance_id=7,
        campaign=C, detail={"job": "lora-r16", "attempt": 1, "run": "x", "artifacts": ["out/"]},
    )  # fmt: skip
    led.record(
        "job_finished", at=900, actor="engine", ok=False, reason="interrupted: host offline",
        instance_id=7, campaign=C, detail={"job": "lora-r16", "attempt": 1, "requeued": True},
    )  # fmt: skip
    assert _unpulled(led)[7] == "lora-r16"  # its retry has not come off yet
    _job(led, 8, "lora-r16", [(True, "artifacts")])
    assert _unpulled(led) == {7: "", 8: ""}


def test_a_retry_elsewhere_whose_pull_failed_leaves_the_cut_off_try_listed(tmp_path):
    led = Ledger(tmp_path / "l.duckdb")
    _create(led, 7)
    _create(led, 8)
    led.record(
        "job_started", at=100, actor="engine", reason="job fit", instance_id=7,
        campaign=C, detail={"job": "fit", "attempt": 1, "run": "x", "artifacts": ["out/"]},
    )  # fmt: skip
    _job(led, 8, "fit", [(False, "artifacts"), (True, "checkpoint")])
    assert _unpulled(led) == {7: "fit (running)", 8: "fit"}
