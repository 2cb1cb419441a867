"""The rules: `decide(fleet, policy, now) -> decisions` (`decisions.py` holds their vocabulary).
Pure: no I/O, no clock reads."""

from __future__ import annotations

from dataclasses import replace

from .bidding.rules import as_rented, bid_down, coming_back, priced, tier_rules
from .blame.patterns import compile_patterns, fatal_match
from .blame.rules import under_blame
from .decisions import (
    Abandon,
    AttemptView,
    Create,
    Decision,
    Finish,
    FleetSnapshot,
    Rebid,
    StartPreflight,
    Stop,
    Verify,
    fmt_span,
    give_up,
)
from .lifecycle import IN_FLIGHT, Phase
from .models import Offer
from .offers.choice import (
    at_risk,
    fit_of,
    hedge_for,
    quarantine_for,
    within_budget,
)
from .offers.picks import rank_creates
from .offers.reuse import restarts
from .policy import Policy
from .worth.swap import leaving, move_off, replaced, swap_out

DOWNLOAD_WORDS = ("Downloading",)  # a progress line: on a healthy host it moves every few seconds
SILENT_WORDS = (
    "Extracting",
    "Verifying Checksum",
    "Status: Downloaded",
    "Starting container",
    "Creating container",
)
# `unknown` is not terminal: Vast adds lifecycle states rentwatch has no name for (SkyPilot
# treats them as initialising), so an unknown status is left to the deadlines
TERMINAL = frozenset({"exited", "offline"})
# the preflight's deadline is never judged under this many I/O floors beyond the policy's
# figure: at a fast market clock each probe try costs a wall second or more
PREFLIGHT_IO_FLOORS = 10


def low_util_since(
    since: float | None, util: float | None, policy: Policy, now: float
) -> float | None:
    """Since when the GPU has been under the idle threshold, after one more reading (the one
    definition of idle time, fed by the market's list and by the host's own NVML samples)."""
    if util is None:
        return since
    return (since if since is not None else now) if util < policy.idle_util_pct else None


def freeze_window(msg: str | None, policy: Policy) -> float | None:
    """The freeze window that applies to this status line (phase-aware when the policy is)."""
    text = msg or ""
    if policy.download_freeze_s is not None and any(w in text for w in DOWNLOAD_WORDS):
        return policy.download_freeze_s
    if policy.extract_freeze_s is not None and (not text or any(w in text for w in SILENT_WORDS)):
        return policy.extract_freeze_s
    return policy.freeze_window_s


def _boot_rules(a: AttemptView, policy: Policy, now: float) -> Decision | None:
    msg = a.status_msg
    if policy.use_patterns:
        hit = fatal_match(msg, compile_patterns(policy.fatal_patterns))
        if hit:
            return give_up(a, "rule:fatal", f"fatal status line: '{(msg or '')[:160]}'", "fatal")
    if policy.terminal_status_abandon and a.status in TERMINAL:
        why = f"status '{a.status}' while booting"
        return give_up(a, "rule:terminal", why, a.status or "unknown")
    window = freeze_window(msg, policy)
    if a.status == "scheduling":  # waiting for its GPU (Vast docs): pending, not frozen
        window = None
    if policy.freeze_window_s is not None and window is not None and now - a.status_since >= window:
        why = f"status unchanged for {fmt_span(now - a.status_since)}: '{(msg or '')[:120]}'"
        return give_up(a, "rule:freeze", why, "freeze")
    if now - a.boot_clock >= policy.boot_deadline_s:
        why = f"not running after {fmt_span(now - a.boot_clock)} (status '{a.status}')"
        return give_up(a, "rule:boot_deadline", why, "boot_timeout")
    return None


def _running_rules(
    a: AttemptView, policy: Policy, now: float, io_floor_s: float = 0.0
) -> Decision | None:
    running_at = a.running_at if a.running_at is not None else a.status_since
    since = now - running_at
    noticed = policy.terminal_status_abandon or since >= policy.preflight_after_s
    if a.status in TERMINAL and noticed:
        if a.passed_preflight:
            return _host_down(a)
        return give_up(
            a, "rule:terminal", f"status '{a.status}' after running", a.status or "unknown"
        )
    if a.verdict is not None:
        if a.verdict.ok:
            if a.phase != Phase.VERIFIED:
                return Verify(a.instance_id, "rule:preflight", a.verdict.reason, True)
            return None
        failure = a.verdict.failure_class or "preflight"
        return give_up(a, "rule:preflight", a.verdict.reason, failure)
    if a.phase == Phase.RUNNING and policy.trust_running:
        return Verify(a.instance_id, "rule:trust_running", "running; nvidia-smi looks fine", False)
    if not a.preflight_started and policy.preflight and since >= policy.preflight_after_s:
        return StartPreflight(a.instance_id)
    if (
        a.preflight_started
        and a.ssh_error is not None
        and since >= policy.preflight_after_s + max(policy.ssh_deadline_s, io_floor_s)
        and a.ssh_failures >= policy.ssh_tries  # a try still in flight is no verdict
    ):
        why = f"SSH not answering {fmt_span(since)} after running: {a.ssh_error[:120]}"
        return give_up(a, "rule:ssh_deadline", why, "ssh_dead")
    deadline = max(policy.preflight_deadline_s, policy.ssh_deadline_s)
    if a.preflight_started and since >= (
        policy.preflight_after_s + deadline + PREFLIGHT_IO_FLOORS * io_floor_s
    ):
        # the backstop: no verdict in time, for whatever reason, is the attempt's end
        why = f"no preflight verdict {fmt_span(since)} after running"
        why += f": {a.ssh_error[:120]}" if a.ssh_error else ""
        return give_up(a, "rule:preflight_deadline", why, "timeout")
    return None


def _host_down(a: AttemptView) -> Stop:
    """A proven host gone down is stopped. One whose container exited on its own is quarantined:
    it passed the preflight and then killed the work it was given (on held-out 90901 and 90903
    such machines, stopped and not quarantined, were rented again in the next campaign and did the
    same); one gone offline is not (a line or a host may come back)."""
    why = f"host went '{a.status}' after it was verified"
    return Stop(a.instance_id, "rule:host_down", why, "exited" if a.status == "exited" else None)


def _verified_rules(
    a: AttemptView, policy: Policy, now: float, idle_active: bool, io_floor_s: float = 0.0
) -> Decision | None:
    if a.untrusted:
        return Stop(a.instance_id, "rule:host_key", a.untrusted, "host_key_changed")
    silent = None if a.silent_since is None else now - a.silent_since
    window = None if policy.silent_stop_s is None else max(policy.silent_stop_s, 30 * io_floor_s)
    if silent is not None and window is not None and silent >= window:
        why = f"no SSH answer for {fmt_span(silent)}"
        return Stop(a.instance_id, "rule:silent", why, "ssh_dead")
    if a.host_fault is not None:  # its machine earns the quarantine its failure class says
        rule, reason, failure_class = a.host_fault
        return Stop(a.instance_id, rule, reason, failure_class)
    if a.status in TERMINAL:
        return _host_down(a)
    if a.throttle is not None and a.throttle.throttled and policy.stop_on_throttle:
        return Stop(a.instance_id, "rule:throttle", a.throttle.reason)
    if (
        idle_active
        and not a.busy
        and a.util_low_since is not None
        and now - a.util_low_since >= policy.idle_grace_s
    ):
        low = fmt_span(now - a.util_low_since)
        why = f"GPU below {policy.idle_util_pct:.0f}% for {low} with no work queued"
        return Stop(a.instance_id, "rule:idle", why)
    free = None if a.free_since is None or a.busy or not idle_active else now - a.free_since
    if free is not None and policy.drained_grace_s is not None and free >= policy.drained_grace_s:
        why = f"no job on it for {fmt_span(free)} and none queued"  # its GPU would bill for nothing
        return Stop(a.instance_id, "rule:drained", why)
    return None


def _with_quarantine(d: Decision, fleet: FleetSnapshot, policy: Policy, now: float) -> Decision:
    """Abandon and Stop carry the quarantine their failure earns (None: none)."""
    if isinstance(d, Abandon):
        return replace(
            d, quarantine=quarantine_for(policy, d.machine_id, d.failure_class, d.reason, now)
        )
    if isinstance(d, Stop) and d.failure_class is not None:
        machine = next(
            (a.machine_id for a in fleet.attempts if a.instance_id == d.instance_id), None
        )
        q = quarantine_for(
            policy, machine, d.failure_class, d.reason, now, fleet.exclusions.quarantined
        )
        return replace(d, quarantine=q)
    return d


def _work_hosts(fleet: FleetSnapshot) -> int:
    """The hosts wanted at once: the fleet, and with jobs no more than there is work for (hold
    and batch; output held on a paused rental is none)."""
    if fleet.jobs_total <= 0:
        return fleet.fleet
    return min(fleet.fleet, fleet.jobs_pending + fleet.jobs_running - fleet.jobs_held)


def decide(fleet: FleetSnapshot, policy: Policy, now: float) -> list[Decision]:
    fleet = replace(fleet, offers=as_rented(fleet.offers, fleet.bidding))  # as each create pays
    out: list[Decision] = _decide(fleet, policy, now)
    out = [_with_quarantine(d, fleet, policy, now) for d in priced(out, fleet.bidding)]
    return under_blame(out, fleet.attempts, fleet.jobs_running, fleet.blame)


def _decide(fleet: FleetSnapshot, policy: Policy, now: float) -> list[Decision]:
    # a destroy that failed is asked again every poll, rather than left billing to the end
    out: list[Decision] = [
        Abandon(iid, None, "rule:abandon", "its destroy is still due", "cancelled")
        for iid in fleet.destroys_due
    ]
    abandoned_now: set[int] = set()
    # an overlapping swap: a slow host's replacement is rented while it works on; it takes
    # no job, and is stopped once free, only once enough hosts not leaving are in service
    going = leaving(fleet.attempts, fleet.slow, now) if fleet.jobs_pending > 0 else set()
    proven = [a.instance_id for a in fleet.attempts if a.phase == Phase.VERIFIED]
    covered = replaced(proven, going, _work_hosts(fleet))
    for a in fleet.attempts:
        d: Decision | None = None
        if a.phase in (Phase.REQUESTED, Phase.BOOTING):
            d = _boot_rules(a, policy, now)
        elif a.phase in (Phase.RUNNING, Phase.VERIFYING):
            d = _running_rules(a, policy, now, fleet.io_floor_s)
        elif a.phase == Phase.VERIFIED and a.passed_preflight:
            d = (
                _verified_rules(a, policy, now, fleet.idle_rule_active, fleet.io_floor_s)
                or move_off(a, fleet.moving)
                or swap_out(a, fleet.slow.get(a.instance_id), fleet.jobs_pending > 0, now, covered)
                or bid_down(a, fleet.bidding)
            )
        elif a.phase == Phase.VERIFIED and a.running_at is not None:
            d = _running_rules(a, policy, now, fleet.io_floor_s)  # trusted on sight (naive)
        elif a.phase == Phase.STOPPED and a.market_stop and not a.passed_preflight:
            # never proven: nothing on it to keep, and its disk bills on; given up as a release
            # gives up what it holds (it says nothing of the host), so its destroy comes due
            d = give_up(a, "rule:market_stop", f"{a.market_stop} before it was proven", "cancelled")
        elif a.phase == Phase.STOPPED and a.bid is not None:  # outbid or resumed (bid_rules)
            # work waits on it too where an exited job's output is still on its disk
            d = tier_rules(a, fleet.bidding, fleet.jobs_pending > 0 or a.busy, now)
        if d is not None:
            out.append(d)
            if isinstance(d, Abandon | Stop):
                abandoned_now.add(a.instance_id)

    staying = [
        a.instance_id
        for a in fleet.attempts
        if a.phase == Phase.VERIFIED and a.instance_id not in abandoned_now
    ]
    verified = sum(1 for i in staying if i not in going)
    swapping = len(staying) - verified  # leaving hosts still at work: their replacements
    in_flight = sum(
        1 for a in fleet.attempts if a.phase in IN_FLIGHT and a.instance_id not in abandoned_now
    )
    if fleet.spent_usd >= fleet.budget_usd:
        why = f"spent ${fleet.spent_usd:.2f} of the ${fleet.budget_usd:.2f} budget"
        return [*out, Finish(False, "rule:budget", why)]
    if fleet.deadline is not None and now >= fleet.deadline:
        out.append(Finish(False, "rule:deadline", "the campaign's deadline passed"))
        return out
    fit = fit_of(fleet.offers, fleet.terms, policy, fleet.exclusions)
    if fleet.jobs_total > 0:
        if fleet.jobs_pending == 0 and fleet.jobs_running == 0:
            done = fleet.jobs_total - fleet.jobs_failed
            why = f"all {fleet.jobs_total} jobs ended: {done} done, {fleet.jobs_failed} failed"
            return [*out, Finish(fleet.jobs_failed == 0, "rule:goal", why)]
        target = _work_hosts(fleet)
        rebid = {d.instance_id for d in out if isinstance(d, Rebid)}
        verified += sum(1 for a in fleet.attempts if coming_back(a, a.instance_id in rebid, now))
    else:
        if verified >= fleet.fleet:
            out.append(Finish(True, "rule:goal", f"fleet of {fleet.fleet} verified"))
            return out
        target = fleet.fleet
    need = max(0, target - verified)
    short = need > swapping  # hosts missing beside the swaps' replacements: worth hedging
    if policy.reuse_stopped and need > in_flight:  # proven rentals we stopped, before creates
        out += (again := restarts(fleet, need - in_flight, verified, target))
        in_flight += len(again)
    room = fleet.max_creates - fleet.creates
    available = fleet.offers_available if fit is None else len(fit)
    hedged, hedge_why = 0, ""
    if fit is not None and short:  # hedging needs the offers' odds; a swap waits on nothing
        hedged, hedge_why = hedge_for(
            fit,
            need,
            fleet.history,
            policy,
            fleet_size=target,
            spare_has_work=fleet.jobs_pending > need,
            deadline_set=fleet.deadline is not None,
            work=fleet.work,
        )
    want = need + (policy.spare_attempts + hedged if short else 0)
    n = max(0, min(want - in_flight, room, available))
    if fleet.create_cap is not None:
        n = min(n, fleet.create_cap)
    chosen: list[tuple[Offer | None, str]] = [(None, "")] * n
    short_of_money = False
    if fit is not None:
        ranked = rank_creates(fit, n, fleet, policy)
        committed = fleet.spent_usd + sum(
            at_risk(a.dph, a.boot_clock, policy.boot_deadline_s, now)
            for a in fleet.attempts
            if a.phase in IN_FLIGHT
        )
        chosen = list(within_budget(ranked, committed, fleet.budget_usd, policy, now))
        short_of_money = len(chosen) < len(ranked)
        n = len(chosen)
    hedging = f" ({hedge_why})" if hedged else ""
    for i, (offer, why) in enumerate(chosen):
        reason = f"{verified} of {target} verified, {in_flight + i} booting: rent one more"
        out.append(Create("rule:replace", reason + hedging, offer, why))
    # out of creates, offers or money: the campaign ends unless proven hosts carry its work on
    carrying = fleet.jobs_total > 0 and (len(staying) > 0 or fleet.proven_paused > 0)
    if n == 0 and in_flight == 0 and need > 0 and not carrying:
        if room <= 0:
            why = f"create budget of {fleet.max_creates} used up with {verified} of "
            out.append(Finish(False, "rule:max_creates", why + f"{fleet.fleet} verified"))
        elif available <= 0:
            out.append(Finish(False, "rule:no_offers", "no fit offer left on the market"))
        elif short_of_money:
            why = f"the next create could pass the ${fleet.budget_usd:.2f} budget "
            out.append(Finish(False, "rule:budget", why + f"(${fleet.spent_usd:.2f} spent)"))
    return out
