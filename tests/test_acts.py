"""What the operator's keys may act on (views/acts.py), read off a snapshot."""

from __future__ import annotations

import dataclasses

import pytest
from rentwatch.views.acts import gone, startable, stop_shrinks

from .test_snapshots import _inst


@pytest.mark.parametrize(
    ("phase", "is_gone", "can_start"),
    [
        ("booting", False, False),
        ("verified", False, False),
        ("stopped", False, True),
        ("outbid", False, True),
        ("destroyed", True, False),
        ("lost", True, False),
    ],
)
def test_gone_and_startable_by_phase(phase, is_gone, can_start):
    s = _inst(1, phase=phase)
    assert gone(s) is is_gone and startable(s) is can_start


@pytest.mark.parametrize(
    ("phase", "proven", "supervised", "fleet", "shrinks"),
    [
        ("verified", True, True, 3, True),
        ("working", True, True, 1, True),
        ("verified", True, True, 0, False),  # nothing left to lower
        ("verified", True, False, 3, False),  # not ours: the campaign's fleet is not its
        ("booting", False, True, 3, False),  # not in service yet: a poll replaces nothing
    ],
)
def test_a_stop_lowers_the_wanted_fleet_only_for_one_in_service(
    phase, proven, supervised, fleet, shrinks
):
    s = dataclasses.replace(_inst(1, phase=phase), passed_preflight=proven, supervised=supervised)
    assert stop_shrinks(s, fleet) is shrinks
