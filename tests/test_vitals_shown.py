"""The vital signs where the fleet shows them: a pane's GPU line and the table's util cell."""

from __future__ import annotations

import dataclasses

from rentwatch.widgets.fleet import FleetTable
from rentwatch.widgets.render import pane_lines

from .test_dashboard_keys import SNAP

LIVE = dataclasses.replace(
    SNAP,
    phase="working",
    ended_at=None,
    util=97.0,
    mem_used_mb=18432.0,
    mem_total_mb=24576.0,
    temp_c=71.0,
    power_w=300.0,
    power_limit_w=450.0,
)


def _gpu_line(s) -> str:
    return pane_lines(s, False)[2].plain


def test_a_pane_shows_temperature_power_and_memory_while_the_gpu_runs():
    line = _gpu_line(LIVE)
    assert "71°C" in line and "300/450 W" in line and "mem 18.0/24.0 GiB" in line
    # a card that reports no power: the rest still shows, nothing reads 0
    quiet = _gpu_line(dataclasses.replace(LIVE, power_w=None, power_limit_w=None))
    assert " W" not in quiet and "71°C" in quiet
    # hot and at its cap are marked (styles), the figures the same
    hot = pane_lines(dataclasses.replace(LIVE, temp_c=91.0, power_w=449.0), False)[2]
    styles = {hot.plain[s.start : s.end]: str(s.style) for s in hot.spans}
    assert "red" in styles["  91°C"] and "yellow" in styles["  449/450 W"]
    # a stopped rental's last sample is history: not shown as its state
    stopped = _gpu_line(dataclasses.replace(LIVE, phase="stopped", ended_at=1.0))
    assert "°C" not in stopped and "GiB" not in stopped


def test_the_table_shows_temperature_beside_utilization():
    assert FleetTable._row(LIVE)[FleetTable.COLUMNS.index("util")] == "97% 71°C"
    no_temp = dataclasses.replace(LIVE, temp_c=None)
    assert FleetTable._row(no_temp)[FleetTable.COLUMNS.index("util")] == "97%"
    stopped = dataclasses.replace(LIVE, phase="stopped", ended_at=1.0)
    assert FleetTable._row(stopped)[FleetTable.COLUMNS.index("util")] == "-"


def test_a_restarted_hosts_samples_from_before_its_stop_are_not_its_readings_now():
    """A restarted, booting row showed "util 97%" from before its stop."""
    from rentwatch.core.billing import Mark
    from rentwatch.engine.attempt import Attempt
    from rentwatch.views.snapshot import run_samples

    a = Attempt(7, None, 70, 7, "RTX 3070", 0.0, 0.128, 0.0085)
    a.marks.append(Mark(0.0, "create", 0.128, 0.0085))
    a.samples.append({"ts": 100.0, "util": 97.0, "temp": 71.0})
    assert [s["util"] for s in run_samples(a)] == [97.0]
    a.marks += [Mark(200.0, "stop"), Mark(300.0, "start")]
    assert run_samples(a) == []  # booting again: nothing read since
    a.samples.append({"ts": 400.0, "util": 0.0, "temp": 38.0})
    assert [s["util"] for s in run_samples(a)] == [0.0]
