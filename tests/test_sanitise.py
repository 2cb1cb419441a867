"""Host- and market-controlled text reaches no terminal and no file as escape sequences: one
sanitiser (`core.text.clean`) on every output path, each path checked with the hostile strings
the issue found (OSC 52 clipboard writes, title changes, screen clears, bidi overrides)."""

from __future__ import annotations

import json
import tomllib

import pytest
from rentwatch.cli.main import main
from rentwatch.core.text import clean
from rentwatch.ledger import Ledger

from tests.shown_text import is_clean

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"
TITLE = "\x1b]0;owned\x1b\\"
CLEAR = "\x1b[2J\x1b[H"
C1_CSI = "\x9b31m"
C1_OSC = "\x9d52;c;AAAA\x9c"
BIDI = "\u202egnp.exe\u202c"
HOSTILE = [OSC52, TITLE, CLEAR, C1_CSI, C1_OSC, BIDI, "\x1bPq#0;2;0;0;0\x1b\\", "a\rb\nc\x00d"]
HOSTILE_GPU = f"RTX 4090{OSC52}{TITLE}"
HOSTILE_STATUS = f"Pulling fs layer{CLEAR}{C1_CSI}{BIDI}"


def _bad(out: str) -> list[str]:
    """What in `out` could drive a terminal or reorder what it shows."""
    found = []
    for ch in ("\x1b", "\x9b", "\x9d", "\x90", "\x9c", "\x07", "\u202e", "\u202c", "\x00"):
        if ch in out:
            found.append(repr(ch))
    return found


@pytest.mark.parametrize("payload", HOSTILE)
def test_clean_leaves_nothing_of_a_sequence(payload):
    out = clean(f"before{payload}after", 500)
    assert is_clean(out), repr(out)
    assert out.startswith("before") and out.endswith("after")
    # the payloads of OSC/DCS strings go too, not only their introducers
    assert "52;c" not in out and "owned" not in out and "#0;2" not in out


def _hostile_ledger(path) -> None:
    led = Ledger(path)
    s = led.intent(
        "create",
        at=0,
        actor="rule:replace",
        reason=f"fleet short{OSC52}",
        campaign=f"camp{TITLE}",
        machine_id=7,
        offer_id=70,
        gpu_dph=0.3,
        storage_dph=0.01,
        gpu_name=HOSTILE_GPU,
    )
    led.outcome(s, at=0, ok=True, instance_id=1001, detail={"gpu_billing": "running"})
    led.record(
        "status",
        at=60,
        actor="engine",
        reason=HOSTILE_STATUS,
        campaign=f"camp{TITLE}",
        instance_id=1001,
    )
    s = led.intent("abandon", at=120, actor="rule:freeze", reason="frozen", instance_id=1001)
    led.outcome(s, at=121, ok=True, detail={"failure_class": f"freeze{C1_OSC}"})
    led.close()


@pytest.mark.parametrize("fmt", [[], ["--csv"], ["--json"]])
def test_rentwatch_ledger_output_is_clean(tmp_path, capsys, fmt):
    path = tmp_path / "l.duckdb"
    _hostile_ledger(path)
    sql = "select campaign, gpu_name, reason, detail from events"
    assert main(["ledger", "--ledger", str(path), *fmt, sql]) == 0
    out = capsys.readouterr().out
    assert not _bad(out), _bad(out)
    assert "RTX 4090" in out and "Pulling fs layer" in out
    if fmt == ["--json"]:
        rows = json.loads(out)
        assert all(is_clean(str(v)) for r in rows for v in r.values())


def test_export_files_are_clean(tmp_path, capsys):
    path = tmp_path / "l.duckdb"
    _hostile_ledger(path)
    out = tmp_path / "out.csv"
    sql = "select gpu_name, reason from events"
    assert main(["ledger", "--ledger", str(path), "--export", str(out), sql]) == 0
    assert not _bad(out.read_text())


def test_receipt_is_clean(tmp_path, capsys):
    path = tmp_path / "l.duckdb"
    _hostile_ledger(path)
    assert main(["receipt", "--ledger", str(path)]) == 0
    assert main(["receipt", "--ledger", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert not _bad(out) and "camp" in out
    assert "\\u001b" not in out  # not even JSON-escaped: the campaign name itself is cleaned


def test_scenario_from_ledger_is_read_back_by_the_simulator(tmp_path, capsys):
    from rentwatch.sim.scenario import parse_scenario

    path = tmp_path / "l.duckdb"
    _hostile_ledger(path)
    assert main(["scenario", "from-ledger", "--ledger", str(path)]) == 0
    text = capsys.readouterr().out
    assert not _bad(text)
    scenario = parse_scenario(tomllib.loads(text), "fitted")
    gpus = {g for hc in scenario.host_classes for g in hc.gpu}
    assert gpus and all(is_clean(g) for g in gpus), gpus


def test_error_lines_are_clean(tmp_path, capsys):
    bad = tmp_path / f"camp{OSC52}{CLEAR}.toml"
    bad.write_bytes(b"name = \xff\xfe\n")
    rc = main(["run", "--headless", "--campaign", str(bad), "--market-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert rc == 2
    assert not _bad(err), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_pane_lines_clean_a_raw_snapshot():
    from rentwatch.views.snapshot import InstanceSnap
    from rentwatch.widgets.render import pane_lines

    snap = InstanceSnap(
        instance_id=1001,
        gpu_name=HOSTILE_GPU,
        machine_id=7,
        host_id=3,
        dph=0.3,
        phase="verified",
        status=f"loading{CLEAR}",
        status_msg=HOSTILE_STATUS,
        status_age_s=10.0,
        freeze_window_s=360.0,
        util=50.0,
        util_history=(10.0, 50.0),
        sm_clock=1500.0,
        max_sm_clock=1900.0,
        throttle=f"hw_slowdown{OSC52}",
        billed_usd=0.01,
        verdict=f"FAILED: {TITLE}",
        created_at=0.0,
        ended_at=None,
        failure_class=f"freeze{C1_OSC}",
        passed_preflight=True,
        job=f"train-1 {BIDI}",
    )
    text = "".join(line.plain for line in pane_lines(snap, selected=False))
    assert not _bad(text), _bad(text)
    assert "RTX 4090" in text and "Pulling fs layer" in text


def test_json_output_is_json_even_with_nan_from_the_market(tmp_path, capsys):
    path = tmp_path / "l.duckdb"
    led = Ledger(path)
    led.record("note", at=0, actor="engine", reason="nan price", gpu_dph=float("nan"))
    led.close()
    sql = "select gpu_dph, 'inf'::double big from events"
    assert main(["ledger", "--ledger", str(path), "--json", sql]) == 0
    rows = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert rows == [{"gpu_dph": None, "big": None}]


def test_receipt_table_takes_markup_like_names_as_text(tmp_path, capsys):
    path = tmp_path / "l.duckdb"
    led = Ledger(path)
    s = led.intent("create", at=0, actor="rule:replace", reason="r", campaign="c[/]x[bold]")
    led.outcome(s, at=0, ok=True, instance_id=1)
    led.close()
    assert main(["receipt", "--ledger", str(path)]) == 0
    assert "c[/]x[bold]" in capsys.readouterr().out


def test_a_stopped_rentals_pane_shows_no_gpu_reading():
    import dataclasses

    from rentwatch.widgets.render import pane_lines

    from .test_dashboard_keys import SNAP

    busy = dataclasses.replace(SNAP, phase="verified", status="running", util=97.0)
    stopped = dataclasses.replace(busy, phase="stopped", status="stopped")
    assert "GPU  97%" in "".join(line.plain for line in pane_lines(busy, selected=False))
    text = "".join(line.plain for line in pane_lines(stopped, selected=False))
    assert "GPU -" in text and "97%" not in text


def test_end_listing_cleans_the_markets_gpu_name():
    # `rentwatch end` lists what a campaign holds with the GPU name the market gave
    from rentwatch.ledger.holdings import Holding

    h = Holding(7, 3, "RTX 4090\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J", True, False, 0.1, 0.2, 0.3, "")
    line = h.line()
    assert is_clean(line) and "RTX 4090" in line
