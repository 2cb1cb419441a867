"""One definition of what a rental bills per hour now (`views.snapshot.rate_now`, the billing
code over the last second): the pane, the table, the detail's head and the header's "$/h now"
say the same figure. A stopped rental showed "$0.137/h" in the pane and the table while its
detail said "$0.0085/h storage only" and the header counted storage only."""

from __future__ import annotations

import dataclasses

from rentwatch.core.billing import Mark
from rentwatch.engine.attempt import Attempt
from rentwatch.views.snapshot import rate_now
from rentwatch.widgets.detail_screen import billed_now
from rentwatch.widgets.fleet import FleetTable
from rentwatch.widgets.render import pane_lines

from .test_dashboard_keys import SNAP
from .test_detail import _gone


def _attempt(*marks: tuple[float, str]) -> Attempt:
    a = Attempt(7, None, 70, 7, "RTX 3070", 0.0, 0.128, 0.0085)
    a.marks = [
        Mark(at, kind, 0.128, 0.0085) if kind == "create" else Mark(at, kind) for at, kind in marks
    ]
    return a


def test_a_stopped_rental_bills_storage_only_wherever_it_is_shown():
    running = _attempt((0.0, "create"), (60.0, "running"))
    stopped = _attempt((0.0, "create"), (60.0, "running"), (600.0, "stop"))
    booting = _attempt((0.0, "create"))
    gone = _attempt((0.0, "create"), (60.0, "running"), (600.0, "destroy"))
    rate, gpu = rate_now(running, "running", 900.0)
    assert gpu and abs(rate - (0.128 + 0.0085)) < 1e-9
    rate, gpu = rate_now(stopped, "running", 900.0)
    assert not gpu and abs(rate - 0.0085) < 1e-9
    # loading: the GPU bills from running on Vast; from the create in the what-if
    assert not rate_now(booting, "running", 30.0)[1] and rate_now(booting, "created", 30.0)[1]
    assert rate_now(gone, "running", 900.0) == (0.0, False)

    snap = dataclasses.replace(
        SNAP, phase="stopped", dph=0.1365, dph_now=0.0085, gpu_billing_now=False
    )
    head = pane_lines(snap, False)[0].plain
    assert "$0.0085/h  STOPPED" in head and "storage only" in head
    assert "$0.137/h" not in pane_lines(snap, False)[0].plain
    assert FleetTable._row(snap)[FleetTable.COLUMNS.index("$/h")] == "0.0085"
    detail = _gone(phase="stopped", dph_now=0.0085, gpu_billing_now=False)
    assert billed_now(detail) == "$0.0085/h storage only"
    live = dataclasses.replace(snap, phase="working", dph_now=0.1365, gpu_billing_now=True)
    assert "$0.137/h" in pane_lines(live, False)[0].plain
    assert FleetTable._row(live)[FleetTable.COLUMNS.index("$/h")] == "0.137"
