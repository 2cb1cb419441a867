"""The pure rules: table-driven cases and properties."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rentwatch.core.decisions import (
    Abandon,
    AttemptView,
    Create,
    Finish,
    FleetSnapshot,
    StartPreflight,
    Stop,
    Verify,
)
from rentwatch.core.errors import ConfigError
from rentwatch.core.lifecycle import Lifecycle, Phase
from rentwatch.core.policy import DEFAULT, NAIVE, SEED, get_policy
from rentwatch.core.preflight.verdict import Verdict
from rentwatch.core.rules import decide
from rentwatch.market.factory import load_campaign

from tests.fuzzing import examples

from .ledgers import new_ledger

NOW = 100_000.0


def att(**kw) -> AttemptView:
    base = dict(
        instance_id=1,
        machine_id=10,
        offer_gpu="RTX 3090",
        phase=Phase.BOOTING,
        status="loading",
        status_msg="abc: Downloading 10MB/100MB",
        status_since=NOW - 10,
        created_at=NOW - 100,
    )
    base.update(kw)
    return AttemptView(**base)


def fleet(*attempts, n=1, creates=1, **kw) -> FleetSnapshot:
    return FleetSnapshot(
        fleet=n,
        max_creates=kw.pop("max_creates", 10),
        creates=creates,
        budget_usd=10,
        spent_usd=kw.pop("spent", 0.0),
        attempts=tuple(attempts),
        **kw,
    )


def only(decisions, kind):
    return [d for d in decisions if isinstance(d, kind)]


@pytest.mark.parametrize(
    "policy, a, expect_class",
    [
        (SEED, att(status_since=NOW - 361), "freeze"),
        (SEED, att(status_since=NOW - 359), None),
        (DEFAULT, att(status_since=NOW - 151), "freeze"),  # downloads move: a tight window
        (
            DEFAULT,
            att(status_msg="abc: Extracting 1.0GB/1.0GB", status_since=NOW - 600),
            None,
        ),  # silent phase
        (SEED, att(status_msg="abc: Extracting 1.0GB/1.0GB", status_since=NOW - 400), "freeze"),
        (SEED, att(status_msg="pull access denied for x, repository does not exist"), "fatal"),
        (NAIVE, att(status_msg="pull access denied for x"), None),
        (NAIVE, att(created_at=NOW - 1801, status_since=NOW - 1801), "boot_timeout"),
        (SEED, att(status="exited", status_msg="Exited (1)"), "exited"),
        (SEED, att(status="offline", status_msg=None), "offline"),
    ],
)
def test_boot_watcher(policy, a, expect_class):
    ab = only(decide(fleet(a), policy, NOW), Abandon)
    assert [d.failure_class for d in ab] == ([expect_class] if expect_class else [])


def test_freeze_reason_is_readable():
    [d] = only(decide(fleet(att(status_since=NOW - 362)), SEED, NOW), Abandon)
    assert (
        d.reason == "status unchanged for 6m02s: 'abc: Downloading 10MB/100MB'"
        and d.rule == "rule:freeze"
    )


def test_preflight_flow():
    running = att(phase=Phase.RUNNING, status="running", status_msg="success", running_at=NOW - 5)
    assert only(decide(fleet(running), SEED, NOW), StartPreflight)
    assert not only(decide(fleet(running), NAIVE, NOW), StartPreflight)
    assert only(decide(fleet(running), NAIVE, NOW), Verify)  # trusts what it sees
    ok = att(
        phase=Phase.VERIFYING,
        status="running",
        running_at=NOW - 50,
        preflight_started=True,
        verdict=Verdict(True, None, "fine", 60.0, 64.0),
    )
    [v] = only(decide(fleet(ok), SEED, NOW), Verify)
    assert v.by_preflight
    bad = att(
        phase=Phase.VERIFYING,
        status="running",
        running_at=NOW - 50,
        preflight_started=True,
        verdict=Verdict(False, "cuda_error", "driver too old"),
    )
    assert only(decide(fleet(bad), SEED, NOW), Abandon)[0].failure_class == "cuda_error"
    dead = att(
        phase=Phase.VERIFYING,
        status="running",
        running_at=NOW - 301,
        preflight_started=True,
        ssh_error="no answer",
    )
    assert only(decide(fleet(dead), SEED, NOW), Abandon)[0].failure_class == "ssh_dead"


def test_verified_instances_are_only_ever_stopped():
    v = att(phase=Phase.VERIFIED, status="offline", running_at=NOW - 500, passed_preflight=True)
    ds = decide(fleet(v), SEED, NOW)
    assert only(ds, Stop) and not only(ds, Abandon)
    with pytest.raises(ValueError):
        Abandon.of(v, "rule:x", "no", "x")


def test_naive_notices_a_dead_trusted_host_only_after_105_minutes():
    trusted = att(phase=Phase.VERIFIED, status="exited", running_at=NOW - 60 * 60)
    assert not only(decide(fleet(trusted), NAIVE, NOW), Abandon)
    later = att(phase=Phase.VERIFIED, status="exited", running_at=NOW - 106 * 60)
    assert only(decide(fleet(later), NAIVE, NOW), Abandon)


def test_fleet_goal_budget_and_create_budget():
    v = att(phase=Phase.VERIFIED, status="running", running_at=NOW - 500, passed_preflight=True)
    assert only(decide(fleet(v, n=1), SEED, NOW), Finish)[0].ok
    assert len(only(decide(fleet(n=3, creates=0), SEED, NOW), Create)) == 3
    spare = DEFAULT.with_overrides({"spare_attempts": 1})
    assert len(only(decide(fleet(n=3, creates=0), spare, NOW), Create)) == 4  # one spare in flight
    assert len(only(decide(fleet(n=3, creates=9), SEED, NOW), Create)) == 1
    [f] = only(decide(fleet(n=3, creates=10), SEED, NOW), Finish)
    assert not f.ok and f.rule == "rule:max_creates"
    [f] = only(decide(fleet(n=3, spent=10.0), SEED, NOW), Finish)
    assert f.rule == "rule:budget"


def test_idle_watchdog_waits_for_work_to_drain():
    idle = att(
        phase=Phase.VERIFIED,
        status="running",
        running_at=NOW - 5000,
        passed_preflight=True,
        util_low_since=NOW - 16 * 60,
    )
    assert not only(decide(fleet(idle, n=2), SEED, NOW), Stop)  # assembling a jobless fleet
    assert only(decide(fleet(idle, n=2, jobs_total=3, jobs_pending=0), SEED, NOW), Stop)
    assert not only(decide(fleet(idle, n=2, jobs_total=3, jobs_pending=1), SEED, NOW), Stop)


phases = st.sampled_from(list(Phase))
statuses = st.sampled_from(
    [None, "created", "loading", "running", "exited", "offline", "unknown", "stopped"]
)
# status lines as hosts print them, spliced with hostile bits
status_lines = st.lists(
    st.sampled_from(
        [
            "abc: Downloading 10MB/100MB",
            "Extracting 1.0GB/1.0GB",
            "success, running img/ssh",
            "Error response from daemon: ",
            "pull access denied",
            "\x1b[2J",
            "[bold red]",
            "\x00",
            "ÿ" * 50,
            " ",
        ]
    )
    | st.text(max_size=8),
    max_size=4,
).map("".join)
views = st.builds(
    AttemptView,
    instance_id=st.integers(1, 50),
    machine_id=st.integers(1, 20),
    offer_gpu=st.just("RTX 4090"),
    phase=phases,
    status=statuses,
    status_msg=st.one_of(st.none(), st.text(max_size=40), status_lines),
    status_since=st.floats(NOW - 10_000, NOW),
    created_at=st.floats(NOW - 20_000, NOW),
    running_at=st.one_of(st.none(), st.floats(NOW - 10_000, NOW)),
    passed_preflight=st.booleans(),
    preflight_started=st.booleans(),
    verdict=st.one_of(
        st.none(),
        st.builds(
            Verdict,
            ok=st.booleans(),
            failure_class=st.sampled_from(["cuda_error", None]),
            reason=st.just("r"),
        ),
    ),
    ssh_error=st.one_of(st.none(), st.just("x")),
    util_low_since=st.one_of(st.none(), st.floats(NOW - 5000, NOW)),
)


@settings(max_examples=examples(2000), deadline=None)
@given(
    st.lists(views, max_size=8, unique_by=lambda v: v.instance_id),
    st.integers(1, 5),
    st.integers(0, 12),
    st.sampled_from([NAIVE, SEED, DEFAULT]),
)
def test_properties(attempts, n, creates, policy):
    snap = FleetSnapshot(
        fleet=n,
        max_creates=12,
        creates=creates,
        budget_usd=10,
        spent_usd=0,
        attempts=tuple(attempts),
    )
    ds = decide(snap, policy, NOW)
    passed = {a.instance_id for a in attempts if a.passed_preflight}
    # no decision ever destroys an instance that passed its preflight
    assert not {d.instance_id for d in ds if isinstance(d, Abandon)} & passed
    # at most one decision per instance; creates never exceed the create budget
    ids = [d.instance_id for d in ds if hasattr(d, "instance_id")]
    assert len(ids) == len(set(ids))
    assert creates + len(only(ds, Create)) <= 12
    # what is abandoned or stopped is replaced: the decisions restore the attempts in flight
    # that the fleet's shortfall asks for, as far as the create budget lasts
    if not only(ds, Finish):
        gone = {d.instance_id for d in ds if isinstance(d, Abandon | Stop)}
        alive = [a for a in attempts if a.instance_id not in gone]
        verified = sum(1 for a in alive if a.phase == Phase.VERIFIED)
        booting = sum(
            1
            for a in alive
            if a.phase in (Phase.REQUESTED, Phase.BOOTING, Phase.RUNNING, Phase.VERIFYING)
        )
        need = max(0, n - verified)
        want = need + (policy.spare_attempts if need else 0)
        assert len(only(ds, Create)) == max(0, min(want - booting, 12 - creates))


def test_lifecycle_refuses_illegal_moves():
    life = Lifecycle().moved(Phase.BOOTING, 1, "listed")
    assert life.phase == Phase.BOOTING
    skipped = life.moved(Phase.VERIFIED, 2, "skip ahead")
    assert skipped.phase == Phase.BOOTING and skipped.refused[0].after == Phase.VERIFIED
    gone = skipped.moved(Phase.DESTROYED, 3, "gone")
    assert gone.phase == Phase.DESTROYED
    assert gone.moved(Phase.RUNNING, 4, "back from the dead").phase == Phase.DESTROYED
    assert [t.after for t in gone.history] == [Phase.BOOTING, Phase.DESTROYED]


def test_a_lifecycle_is_an_immutable_value_with_a_version():
    """Each change is a new version; the old one stands as it was (a snapshot stays true)."""
    life = Lifecycle()
    booting = life.moved(Phase.BOOTING, 1, "listed")
    assert life.phase == Phase.REQUESTED and life.history == () and life.version == 0
    assert booting.version == 1 and booting.with_proof(True).version == 2
    assert booting.moved(Phase.VERIFIED, 2, "skip ahead").version == 2  # refused: still counted
    with pytest.raises(dataclasses.FrozenInstanceError):
        booting.phase = Phase.RUNNING  # type: ignore[misc]


def test_a_rental_started_again_is_back_in_service():
    """`ended_at` is None once a stopped instance boots again: the dashboard would fade it out
    and quit would not count it as held otherwise."""
    life = Lifecycle().moved(Phase.BOOTING, 1, "listed").moved(Phase.STOPPED, 2, "stopped")
    assert life.phase == Phase.STOPPED
    assert life.ended_at() == 2
    life = life.moved(Phase.BOOTING, 3, "started again")
    assert life.phase == Phase.BOOTING
    assert life.ended_at() is None
    life = life.moved(Phase.DESTROYED, 4, "destroyed")
    assert life.phase == Phase.DESTROYED
    assert life.ended_at() == 4


@pytest.mark.parametrize(
    "text, needle",
    [
        ("image = 'x'\nmax_dph = 1\nbudget_usd = 1", "name: is required"),
        ("name = 'a b'\nimage = 'x'\nmax_dph = 1\nbudget_usd = 1", "line 1: name"),
        ("name = 'a'\nimage = 'x'\nmax_dph = 'cheap'\nbudget_usd = 1", "line 3: max_dph"),
        (
            "name = 'a'\nimage = 'x'\nmax_dph = 1\nbudget_usd = 1\nfleet = 5\nmax_creates = 2",
            "max_creates",
        ),
        (
            "name = 'a'\nimage = 'x'\nmax_dph = 1\nbudget_usd = 1\noffer_query = 'num_gpus >>> 3'",
            "offer_query",
        ),
        ("name = 'a'\nimage = 'x'\nmax_dph = 1\nbudget_usd = 1\ncolour = 'red'", "colour"),
        (
            "name = 'a'\nimage = 'x'\nmax_dph = 1\nbudget_usd = 1\n[[jobs]]\nrun = 'x'\nenv = {HF_TOKEN = 'abc'}",
            "secret",
        ),
        ("name = [", "campaign"),
    ],
)
def test_broken_campaign_files_name_line_and_field(text, needle):
    with pytest.raises(ConfigError, match=needle):
        load_campaign(text)


def test_campaign_and_overrides():
    c = load_campaign(
        "name='a'\nimage='x'\nimage_cuda='12.4'\nmax_dph=0.5\nbudget_usd=5\nfleet=2\n"
        "offer_query='num_gpus=1 gpu_name in [RTX_3090,RTX_4090]'\n[policy]\nfreeze_window_s=300\n"
    )
    assert c.offer_query == {"num_gpus": {"eq": 1}, "gpu_name": {"in": ["RTX 3090", "RTX 4090"]}}
    assert get_policy("seed").with_overrides(c.policy).freeze_window_s == 300
    with pytest.raises(ConfigError):
        get_policy("reckless")
    with pytest.raises(ConfigError):
        SEED.with_overrides({"frezee_window_s": 1})


def test_executor_refuses_automated_destroy_of_a_verified_instance(tmp_path):
    """The second layer: even a hand-built Abandon for a proven instance is refused by the
    executor, and a human destroy needs the instance's id typed back."""
    import asyncio

    from rentwatch.engine.attempt import Attempt
    from rentwatch.engine.hosts.ssh import SSHRunner, load_or_create_key
    from rentwatch.engine.intents import DestroyIntent
    from rentwatch.engine.supervisor import AutomationRefused, DestroyConfirmation, Supervisor
    from rentwatch.market.factory import load_campaign
    from rentwatch.market.vast.client import VastClient

    async def run() -> None:
        client = VastClient("http://127.0.0.1:9", "k", max_attempts=1, min_intervals={})
        camp = load_campaign("name='g'\nimage='x'\nmax_dph=1\nbudget_usd=1\n")
        sup = Supervisor(
            client,
            new_ledger(),
            camp,
            SEED,
            SSHRunner(load_or_create_key(tmp_path / "k")),
            log=lambda _: None,
        )
        a = Attempt(
            instance_id=7,
            offer=None,
            machine_id=70,
            host_id=1,
            gpu_name="RTX 3090",
            created_at=0.0,
            gpu_dph=0.2,
            storage_dph=0.01,
        )
        a.life = a.life.with_proof(True)
        a.life = a.life.moved(Phase.BOOTING, 0, "x")
        a.life = a.life.moved(Phase.RUNNING, 1, "x")
        a.life = a.life.moved(Phase.VERIFIED, 2, "x")
        sup.fleet.add(a)
        with pytest.raises(AutomationRefused):
            await sup.executor.execute(Abandon(7, 70, "rule:forged", "forged", "fatal"))
        refused = await sup.apply(DestroyIntent(DestroyConfirmation(7, "8")))
        assert refused.refused and "does not name it" in refused.refused
        assert a.life.phase == Phase.VERIFIED
        await client.aclose()

    asyncio.run(run())


def _unreachable(failures: int, since: float) -> AttemptView:
    return att(
        phase=Phase.VERIFYING,
        status="running",
        running_at=NOW - since,
        preflight_started=True,
        ssh_error="no answer yet",
        ssh_failures=failures,
    )


@pytest.mark.parametrize(
    "policy, failures, since, floor, gives_up",
    [
        (SEED, 0, 301, 0.0, True),  # the article's: the deadline alone, as before
        (DEFAULT, 0, 151, 0.0, False),  # the first try has not even ended: no verdict
        (DEFAULT, 1, 149, 0.0, False),
        (DEFAULT, 1, 151, 0.0, True),
        (DEFAULT, 1, 151, 600.0, False),  # a fast clock: 1 wall second is 600 market seconds
        (DEFAULT, 1, 601, 600.0, True),
    ],
)
def test_ssh_deadline_needs_tries_and_a_wall_floor(policy, failures, since, floor, gives_up):
    snap = fleet(_unreachable(failures, since), io_floor_s=floor)
    assert bool(only(decide(snap, policy, NOW), Abandon)) == gives_up


def test_a_verified_host_silent_past_the_window_is_stopped_never_destroyed():
    """[V] A host is not trusted to stop itself: a verified rental whose sessions have had no
    answer for the policy's window is stopped by the rules (its machine quarantined), not
    destroyed; a shorter silence is only looked at."""
    quiet = dict(
        phase=Phase.VERIFIED, status="running", running_at=NOW - 3600, passed_preflight=True
    )
    window = DEFAULT.silent_stop_s
    assert window
    late = decide(fleet(att(silent_since=NOW - window - 1, **quiet)), DEFAULT, NOW)
    stops = only(late, Stop)
    assert [s.rule for s in stops] == ["rule:silent"] and not only(late, Abandon)
    assert stops[0].quarantine is not None
    early = decide(fleet(att(silent_since=NOW - window / 2, **quiet)), DEFAULT, NOW)
    assert not only(early, Stop) and not only(early, Abandon)


@pytest.mark.parametrize("status, quarantined", [("exited", True), ("offline", False)])
def test_a_proven_host_whose_container_exits_is_quarantined(status, quarantined):
    """A machine that passed its preflight and then exited on its own is not rented again (the
    warm runs of held-out 90901 and 90903 rented such machines twice); one gone offline is only
    stopped. Both are stopped, never destroyed."""
    down = att(phase=Phase.VERIFIED, status=status, running_at=NOW - 500, passed_preflight=True)
    ds = decide(fleet(down), DEFAULT, NOW)
    (stop,) = only(ds, Stop)
    assert stop.rule == "rule:host_down" and not only(ds, Abandon)
    assert (stop.quarantine is not None) == quarantined
    if quarantined:
        assert stop.quarantine.machine_id == 10 and stop.quarantine.scope == "ledger"
