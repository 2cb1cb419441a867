"""The fleet record: every attempt of the campaign, what is held, what was spent, the creates made,
and the quarantined machines."""

from __future__ import annotations

import collections

from ..core.lifecycle import ALIVE, HELD, Phase
from ..core.offers.choice import Quarantine
from ..core.policy import Policy
from ..ledger import EventKind, Ledger
from .attempt import REUSABLE_STOPS, Attempt


class Fleet:
    def __init__(self, fleet_size: int) -> None:
        self.wanted = fleet_size  # verified instances wanted now (the operator may change it)
        self.attempts: dict[int, Attempt] = {}
        self.creates = 0
        self.quarantine: dict[int, str] = {}  # machine id -> why
        # machines a teammate's controller quarantined (the team store): not rented, and
        # nothing more (they never act on what this fleet holds)
        self.team_quarantine: dict[int, str] = {}
        # without quarantine, a failed machine is skipped for one retry only (as SkyPilot does)
        self.recent_failures: collections.deque[int] = collections.deque(maxlen=max(1, fleet_size))

    def restore(self, ledger: Ledger, campaign: str, policy: Policy, now: float) -> None:
        """At a start: the quarantine in force under the policy's scope (ledger-wide and
        unexpired, or this campaign's) and the creates this campaign already made."""
        if policy.quarantine_persistent:
            self.quarantine.update(ledger.quarantined(now))
        elif policy.quarantine:
            for ev in ledger.campaign_events(campaign, EventKind.QUARANTINE):
                if ev.machine_id is not None:
                    self.quarantine[ev.machine_id] = ev.reason
        self.creates = ledger.creates_made(campaign)

    def heed_team(self, ledger: Ledger, policy: Policy, now: float) -> None:
        """Each poll: the teammates' quarantines in force, under a policy that quarantines."""
        self.team_quarantine = ledger.teammates_quarantined(now) if policy.quarantine else {}

    def add(self, a: Attempt) -> None:
        self.attempts[a.instance_id] = a

    def get(self, instance_id: int) -> Attempt | None:
        return self.attempts.get(instance_id)

    def __getitem__(self, instance_id: int) -> Attempt:
        return self.attempts[instance_id]

    def held(self) -> list[Attempt]:
        """What the controller must stop or destroy before it dies: only what it supervises, and a
        bid rental the market paused (it resumes, and bills, unless we stop it)."""
        return [
            a
            for a in self.attempts.values()
            if a.owned
            and (a.life.phase in HELD or (a.life.phase == Phase.STOPPED and a.resumes_by_itself))
        ]

    def alive(self) -> list[Attempt]:
        """The supervised instances alive now: what the rules decide on."""
        return [a for a in self.attempts.values() if a.owned and a.life.phase in ALIVE]

    def to_decide(self) -> list[Attempt]:
        """What the rules decide on: the alive, what the market stopped before it was proven, a bid
        rental paused or resumed, and a proven rental we stopped for want of work."""
        return [
            a
            for a in self.attempts.values()
            if a.owned
            and (
                a.life.phase in ALIVE
                or (
                    a.life.phase == Phase.STOPPED
                    and (
                        a.market_stop is not None
                        or a.resumes_by_itself
                        or a.stop_rule in REUSABLE_STOPS
                    )
                )
            )
        ]

    def observed(self) -> list[Attempt]:
        """Instances shown and priced but not supervised: only a person acts on them."""
        return [a for a in self.attempts.values() if not a.owned]

    def in_service(self) -> list[Attempt]:
        """Proven by a preflight and in service now: the hosts jobs run on."""
        return [
            a
            for a in self.attempts.values()
            if a.owned and a.passed_preflight and a.life.phase == Phase.VERIFIED
        ]

    def on_market(self) -> list[Attempt]:
        """What the campaign still has on the market, billing something: what it holds, and
        its stopped rentals (their storage bills until they are destroyed)."""
        return [
            a
            for a in self.attempts.values()
            if a.owned and (a.life.phase in HELD or a.life.phase == Phase.STOPPED)
        ]

    def destroys_due(self) -> tuple[int, ...]:
        """Given up, never proven, still held: a failed destroy, or one back after its destroy."""
        return tuple(
            a.instance_id
            for a in self.held()
            if a.life.phase == Phase.ABANDONED and not a.passed_preflight
        )

    def held_machines(self) -> frozenset[int]:
        return frozenset(a.machine_id for a in self.held() if a.machine_id is not None)

    def spent(self, gpu_billing: str, now: float) -> float:
        """USD billed so far by every supervised attempt, at its highest price shown
        (`worst_charges`)."""
        return sum(a.worst_charges(gpu_billing, now) for a in self.attempts.values() if a.owned)

    def quarantined(self, q: Quarantine) -> None:
        self.quarantine[q.machine_id] = q.reason

    def failed_on(self, machine_id: int | None) -> None:
        if machine_id is not None:
            self.recent_failures.append(machine_id)
