"""The campaign's blame book: one `Evidence` per campaign, fed by what the engine sees, and the
campaign fault once proven (DESIGN.md rule 10). A failure blamed on the campaign, or suspected,
spares the host its quarantine; a proven fault stops creating and ends the campaign once nothing
is left to do. A restart of the unchanged campaign finds the fault in the ledger."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from ..core.blame.fault import (
    Blame,
    BlameView,
    Evidence,
    Failure,
    Party,
    Stage,
    blame,
    last_error_line,
    normalise,
    shows_layers,
)
from ..core.campaign import Campaign
from ..core.decisions import Abandon
from ..ledger import EventKind, Ledger

if TYPE_CHECKING:
    from .attempt import Attempt
    from .journal import Journal

K = EventKind


def signature(campaign: Campaign) -> str:
    """What the operator changes to fix a faulted campaign: its image and its job commands."""
    text = "\n".join([campaign.image, *(j.run for j in campaign.jobs)])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BlameBook:
    def __init__(self, journal: Journal, campaign: Campaign) -> None:
        self.journal = journal
        self.image = campaign.image
        self.signature = signature(campaign)
        self.evidence = Evidence()
        self.fault: Blame | None = None
        self.spared: dict[int, Blame] = {}  # instance id -> why it is not the host's fault

    @property
    def banner(self) -> str | None:
        """The line the dashboard's campaign bar shows while the campaign is faulted."""
        if self.fault is None:
            return None
        return f"CAMPAIGN FAULT: {self.fault.reason} - creates stopped; fix and reload it"

    def restore(self, ledger: Ledger) -> None:
        """After a restart, a fault recorded for this same campaign (image, jobs) holds."""
        for ev in ledger.campaign_events(self.journal.campaign, K.CAMPAIGN_FAULT):
            if ev.detail.get("signature") == self.signature:
                self.fault = Blame(Party.CAMPAIGN, str(ev.detail.get("cause")), ev.reason)
            else:
                self.fault = None
        if self.fault is not None:
            self.journal.say(
                f"FAULT  {self.fault.reason} (recorded earlier; the campaign is unchanged: "
                "fix its image or job command and start it again)"
            )

    # -- evidence ------------------------------------------------------------------------------
    def saw(self, a: Attempt, status_msg: str) -> None:
        """A loading status line: layer progress proves the registry serves the image."""
        if a.machine_id is not None and shows_layers(status_msg):
            self.evidence = self.evidence.served(self.image, a.machine_id)

    def ran(self, a: Attempt) -> None:
        """The image reached `running` on this machine: it pulls."""
        if a.machine_id is not None:
            self.evidence = self.evidence.ran(self.image, a.machine_id)

    def probe_passed(self, a: Attempt) -> None:
        """A preflight computed here with the campaign's image: it has what the probe needs,
        so a probe failing for want of python3 or torch elsewhere is that host's."""
        if a.machine_id is not None:
            self.evidence = self.evidence.probe_passed(self.image, a.machine_id)

    @staticmethod
    def job_key(run: str) -> str:
        """Jobs compare by their command with its numbers blanked: `--seed 1` and `--seed 2` are one
        command, since a failed job is not retried and would never fail on a second machine."""
        return normalise(run)[:120]

    def job_finished(self, run: str) -> None:
        self.evidence = self.evidence.job_finished(self.image, self.job_key(run))

    def judge(
        self,
        a: Attempt,
        stage: Stage,
        text: str,
        exit_code: int | None = None,
        job: str | None = None,
    ) -> Blame:
        """Classify one failure on `a` against the evidence so far, then add it."""
        failure = Failure(a.machine_id or -a.instance_id, self.image, stage, text, exit_code, job)
        found = blame(failure, self.evidence)
        self.evidence = self.evidence.failed(failure)
        self.take(a, found)
        return found

    def job_failed(self, a: Attempt, run: str, exit_code: int, log_tail: str) -> Blame:
        """A job that exited non-zero: its last error line, exit code and command."""
        line = last_error_line(log_tail)
        return self.judge(a, Stage.JOB, line, exit_code, self.job_key(run))

    def take(self, a: Attempt, found: Blame) -> None:
        """Act on a blame: spare the host unless it is the host's; a campaign fault stops."""
        if found.party is Party.HOST:
            return
        self.spared[a.instance_id] = found
        if found.party is Party.SUSPECT:
            self.journal.say(
                f"blame  i:{a.instance_id} m:{a.machine_id}: {found.reason} "
                "(host spared: no quarantine)"
            )
            return
        if self.fault is not None:
            return
        self.fault = found
        self.journal.fact(
            K.CAMPAIGN_FAULT,
            a,
            actor="rule:blame",
            ok=False,
            reason=found.reason,
            detail={"cause": found.cause, "image": self.image, "signature": self.signature},
        )
        self.journal.say(
            f"FAULT  campaign {self.journal.campaign}: {found.reason} - creates stopped, no host "
            "blamed; fix the campaign (image, job command) and start it again"
        )

    # -- what the supervisor asks --------------------------------------------------------------
    @property
    def pull_in_doubt(self) -> bool:
        """A registry refused the image on one machine and it has run on none: no new machine is
        rented until one in flight decides (with none in flight, one more is)."""
        ran = any(img == self.image for img, _ in self.evidence.image_ran_on)
        return not ran and any(
            b.party is Party.SUSPECT and b.cause == "pull_denied" for b in self.spared.values()
        )

    def holds_creates(self, others_in_flight: bool) -> bool:
        """No create now: a campaign fault, or a pull in doubt a machine in flight will decide."""
        return self.fault is not None or (self.pull_in_doubt and others_in_flight)

    def view(self) -> BlameView:
        """What the rules read of the blame so far (`core/blame/rules.py` decides with it)."""
        return BlameView(
            image=self.image,
            evidence=self.evidence,
            fault=self.fault.reason if self.fault is not None else None,
            pull_in_doubt=self.pull_in_doubt,
            spared=frozenset(self.spared),
        )

    def on_abandon(self, a: Attempt, d: Abandon) -> None:
        """Record what an abandon being carried out says of blame, as the rules judged it."""
        if d.rule == "rule:blame" and self.fault is not None:
            self.spared.setdefault(a.instance_id, self.fault)
        elif d.failure_class == "fatal" and a.instance_id not in self.spared:
            self.judge(a, Stage.PULL, a.status_msg or "")

    def detail(self, a: Attempt) -> dict[str, str]:
        """What an abandon event carries about blame (`blame` and its cause) where the host is
        spared; nothing for the host's own fault."""
        found = self.spared.get(a.instance_id)
        return {} if found is None else {"blame": str(found.party), "cause": found.cause}
