"""Figures that disagreed or lied on screen (issue 49, item 5), each pinned: the detail's
utilization chart, one $/h for a rental everywhere, the spend said once, stopped counted as
the campaign's rate counts them."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

from rentwatch.core.billing import Mark
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.engine.attempt import Attempt
from rentwatch.views.detail import build
from rentwatch.views.snapshot import last_run_samples
from rentwatch.widgets.detail_screen import billed_now, render_gpu
from rentwatch.widgets.fleet import FleetTable
from rentwatch.widgets.header import fleet_fields
from rentwatch.widgets.render import campaign_fields, pane_lines

from .test_snapshots import DETAIL, FLEET, _inst


def _restarted(phase: Phase) -> Attempt:
    """A host that worked at 97% for 100 samples, was stopped, started again and read idle."""
    return Attempt(
        7,
        None,
        70,
        7,
        "RTX 3070",
        0.0,
        0.128,
        0.0085,
        life=Lifecycle(phase=phase),
        marks=[Mark(0.0, "create", 0.128, 0.0085), Mark(300.0, "stop"), Mark(400.0, "start")],
        samples=[{"ts": 100.0 + k, "util": 97.0} for k in range(100)]
        + [{"ts": 500.0, "util": 0.0}],
    )


def _detail_of(a: Attempt) -> Any:
    sup: Any = SimpleNamespace(
        attempts={a.instance_id: a},
        now=lambda: 600.0,
        market=SimpleNamespace(gpu_billing="running", time_scale=1.0),
        ledger=SimpleNamespace(instance_events=lambda *args, **kw: []),
        jobs=SimpleNamespace(jobs=[]),
        campaign=SimpleNamespace(name="c"),
    )
    return asyncio.run(build(sup, a.instance_id, logs=False))


def test_the_detail_charts_only_the_samples_of_the_run_it_speaks_of():
    """The chart stayed full to its right edge (100 readings at 97% from before the stop,
    resampled, with the one idle reading since a dot at the end) beside "utilization 0%"."""
    d = _detail_of(_restarted(Phase.VERIFIED))
    assert [s.util for s in d.samples] == [0.0]
    text = render_gpu(dataclasses.replace(d, phase="idle"), width=60).plain
    chart = [line for line in text.splitlines() if "▕" in line]
    assert chart and not any(c in line for line in chart for c in "▁▂▃▄▅▆▇█")
    assert "utilization, now 0%" in text
    # stopped again: the run that ended is shown as history, not the one before it
    stopped = _restarted(Phase.STOPPED)
    stopped.marks.append(Mark(550.0, "stop"))
    assert [s["util"] for s in last_run_samples(stopped)] == [0.0]
    # a reading the host did not give is not 0%
    blank = dataclasses.replace(d.samples[0], util=None)
    assert "utilization, now -" in render_gpu(dataclasses.replace(d, samples=(blank,))).plain


def test_a_stopped_rentals_rate_is_one_figure_in_the_pane_the_table_and_its_detail():
    """ "$0.137/h" in the pane and table, "$0.0085/h storage only" in its detail."""
    s = _inst(1, phase="stopped", dph=0.137, dph_now=0.0085, gpu_billing_now=False, ended_at=1.0)
    assert "$0.0085/h" in pane_lines(s, False)[0].plain
    assert FleetTable._row(s)[FleetTable.COLUMNS.index("$/h")] == "0.0085"
    d = dataclasses.replace(
        DETAIL, phase="stopped", gpu_dph=0.1285, storage_dph=0.0085, dph_now=0.0085
    )
    assert billed_now(dataclasses.replace(d, gpu_billing_now=False)) == "$0.0085/h storage only"


def test_the_header_counts_stopped_rentals_as_its_rate_counts_them():
    """The rate now is the campaign's; an observed stopped rental is not in it."""
    mine = _inst(1, phase="stopped", dph_now=0.0085, gpu_billing_now=False, ended_at=1.0)
    theirs = dataclasses.replace(mine, instance_id=99, supervised=False)
    outbid = _inst(2, phase="outbid", dph_now=0.0085, gpu_billing_now=False)
    also = dataclasses.replace(theirs, instance_id=98)
    f = dataclasses.replace(FLEET, instances=(mine, theirs, also, outbid), dph_now=0.017)
    assert fleet_fields(f, "new")[0].plain == "$0.017/h now (2 stopped: storage only)"


def test_the_spend_is_one_figure_beside_its_budget():
    """ "Spent $0.025" stood beside "budget … $0.02/$5.00"."""
    f = dataclasses.replace(FLEET, spent_usd=0.0249, budget_usd=5.0)
    fields = [t.plain for t in (*campaign_fields(f), *fleet_fields(f, "new"))]
    assert "spent $0.025" in fields
    assert any(t.startswith("budget ") and t.endswith(" $0.025/$5.00 (0%)") for t in fields)


def test_the_bulk_destroy_and_quit_counts_are_the_read_models():
    """What D offers and what quit counts, from the snapshot (views), not the widget."""
    dud = _inst(1, phase="stopped", ended_at=1.0)
    offline = _inst(2, phase="stopped", ended_at=1.0, passed_preflight=True, status="offline")
    kept = _inst(3, phase="stopped", ended_at=1.0, passed_preflight=True, status="exited")
    theirs = dataclasses.replace(dud, instance_id=99, supervised=False)
    live = _inst(4)
    f = dataclasses.replace(FLEET, instances=(dud, offline, kept, theirs, live))
    assert [s.instance_id for s in f.bulk_candidates()] == [33771, 33772]
    assert (f.held, f.stopped) == (1, 3)
