"""Whose fault is a failure: the host's, or the campaign's (its image, credentials or job)?

On evidence, not suspicion: the campaign's when the image lacks what it needs on two machines
while no preflight with it computed, when the registry denies the image, or when the same failure
shows on two machines and nowhere has the image worked. One machine is a suspicion (`SUSPECT`: no
quarantine, the next machine decides); anything else is the host's."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from ..text import clean


class Party(StrEnum):
    HOST = "host"
    SUSPECT = "suspect"  # looks like the campaign's, seen on one machine only
    CAMPAIGN = "campaign"


class Stage(StrEnum):
    PULL = "pull"  # the boot status line (image pull, container create)
    PROBE = "probe"  # the preflight over SSH
    JOB = "job"  # a job command's failure


@dataclass(frozen=True)
class Failure:
    """One failure as the supervisor saw it. `text` is the status line, the probe's error
    (`Type: message`, or the shell's stderr) or the job's last error line."""

    machine_id: int
    image: str
    stage: Stage
    text: str
    exit_code: int | None = None
    job: str | None = None


@dataclass(frozen=True)
class Evidence:
    """What the campaign has seen: failures, machines the image reached `running` on, jobs done."""

    failures: tuple[Failure, ...] = ()
    image_ran_on: frozenset[tuple[str, int]] = field(default_factory=frozenset)  # (image, machine)
    jobs_ok: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (image, job)
    # (image, machine) where the registry served the image's layers: a denial comes before any
    # layer, so a host that downloads proves the registry lets us pull it
    served_on: frozenset[tuple[str, int]] = field(default_factory=frozenset)
    # (image, machine) where a preflight computed: the image has what the probe needs
    probe_ok_on: frozenset[tuple[str, int]] = field(default_factory=frozenset)

    def probe_passed(self, image: str, machine_id: int) -> Evidence:
        return replace(self, probe_ok_on=self.probe_ok_on | {(image, machine_id)})

    def failed(self, failure: Failure) -> Evidence:
        return replace(self, failures=(*self.failures, failure)[-200:])

    def ran(self, image: str, machine_id: int) -> Evidence:
        return replace(self, image_ran_on=self.image_ran_on | {(image, machine_id)})

    def served(self, image: str, machine_id: int) -> Evidence:
        return replace(self, served_on=self.served_on | {(image, machine_id)})

    def job_finished(self, image: str, job: str) -> Evidence:
        return replace(self, jobs_ok=self.jobs_ok | {(image, job)})


@dataclass(frozen=True)
class Blame:
    party: Party
    # no_python, no_torch, module_missing, pull_denied, repeated_fatal, repeated_job, host
    cause: str
    reason: str  # a sentence for the banner, the log and the ledger

    @property
    def quarantine(self) -> bool:
        """Only a host's own fault may cost its machine a quarantine or reputation."""
        return self.party is Party.HOST


# Registry answers that name the image or the credentials (Docker's and containerd's wording,
# as the daemon prints them in the Vast status line).
PULL_DENIAL = re.compile(
    r"pull access denied|manifest unknown|manifest for \S+ not found|repository does not exist|"
    r"unauthorized|authentication required|denied: requested access to the resource is denied|"
    r"invalid reference format",
    re.I,
)

# Lines that are the host's whatever the image: its container runtime, its GPU plumbing, its
# memory. Repeating on two machines does not make them the campaign's. The container runtime
# failing to start the container (runc, its GPU hooks) is the host's; an image's own fault reads
# differently (no such executable, the wrong architecture).
HOST_SIGNATURE = re.compile(
    r"CDI devices|nvidia-container-cli|fault address|no space left on device|"
    r"driver version is insufficient|no CUDA-capable device|connection (reset|refused|timed out)|"
    r"i/o timeout|OCI runtime (create|exec|start) failed"
    r"(?!.*(executable file not found|exec format error|no such file or directory))",
    re.I,
)

_NO_PYTHON = re.compile(
    r"python3?: (command )?not found|python3?: No such file or directory|"
    r"exec: \"?python3?\"?: executable file not found",
    re.I,
)
_MODULE = re.compile(r"No module named '?([A-Za-z0-9_.]+)'?")
_VARIABLE = re.compile(r"0x[0-9a-f]+|\b[0-9a-f]{12,}\b|\d+(\.\d+)?", re.I)


def normalise(text: str) -> str:
    """A failure line with per-host parts blanked, so one failure on two machines compares equal."""
    return " ".join(_VARIABLE.sub("#", text.strip().lower()).split())[:200]


def last_error_line(log_tail: str) -> str:
    """The line a failed job's log ends on (a traceback's last line names the error), made safe
    to show (`text.clean`): the text two machines are compared by."""
    lines = (clean(line, 300).strip() for line in reversed(log_tail.splitlines()))
    return next((line for line in lines if line), "")


# Docker's per-layer progress: only printed once the registry granted the pull
_LAYER_PROGRESS = re.compile(
    r"\b(Downloading|Download complete|Verifying Checksum|Pull complete|Extracting|"
    r"Already exists|Digest: sha256:)",
)


def shows_layers(status_msg: str) -> bool:
    return bool(_LAYER_PROGRESS.search(status_msg))


def probe_blame(text: str, exit_code: int | None) -> Blame | None:
    """A deterministic probe failure that the image causes, or None. The probe runs as
    `python3 -`: a shell without python3 answers exit 127 and `command not found`."""
    if _NO_PYTHON.search(text) or (exit_code == 127 and "python" in text.lower()):
        return Blame(Party.CAMPAIGN, "no_python", "the image has no python3: the probe cannot run")
    m = _MODULE.search(text)
    if m or "ModuleNotFoundError" in text:
        module = m.group(1) if m else "a module"
        if module.split(".")[0] == "torch":
            why = "the image has no torch and the probe needed it"
            return Blame(Party.CAMPAIGN, "no_torch", why)
        why = f"the image lacks {module}, which the probe imports"
        return Blame(Party.CAMPAIGN, "module_missing", why)
    return None


def _others(failure: Failure, evidence: Evidence, key: Callable[[Failure], object]) -> set[int]:
    """Distinct other machines whose failure for the same image at the same stage has its `key`."""
    mine = key(failure)
    return {
        f.machine_id
        for f in evidence.failures
        if f.stage is failure.stage
        and f.image == failure.image
        and f.machine_id != failure.machine_id
        and key(f) == mine
    }


def _same_line(f: Failure) -> object:
    """What two failures must share to be the same: the line, and for a job its name and exit."""
    return (
        normalise(f.text) if f.stage is not Stage.JOB else (f.job, f.exit_code, normalise(f.text))
    )


def _image_ran(image: str, ran_on: Iterable[tuple[str, int]]) -> bool:
    return any(img == image for img, _ in ran_on)


def _probe_stage(failure: Failure, evidence: Evidence, shown: str) -> Blame:
    """A probe that could not run for the image's lack: the campaign's on two or more machines while
    no preflight with the image computed; one machine is a suspicion; after a computed preflight
    it is that host's own."""
    found = probe_blame(failure.text, failure.exit_code)
    if found is None:
        return Blame(Party.HOST, "host", f"preflight failed on this host: {shown}")
    if _image_ran(failure.image, evidence.probe_ok_on):
        why = f"{found.reason} on this host only: a preflight with the image computed elsewhere"
        return Blame(Party.HOST, "host", f"{why} ({shown})")
    others = _others(
        failure, evidence, lambda f: getattr(probe_blame(f.text, f.exit_code), "cause", None)
    )
    if others:
        return replace(found, reason=f"{found.reason} (seen on {len(others) + 1} machines)")
    return Blame(Party.SUSPECT, found.cause, f"{found.reason}? (one machine; a second decides)")


def blame(failure: Failure, evidence: Evidence = Evidence()) -> Blame:
    shown = " ".join(failure.text.split())[:160]
    if failure.stage is Stage.PROBE:
        return _probe_stage(failure, evidence, shown)
    ran = _image_ran(failure.image, evidence.image_ran_on)
    if failure.stage is Stage.PULL:
        if HOST_SIGNATURE.search(failure.text) or ran:
            why = "the image ran elsewhere" if ran else "a host-side failure"
            return Blame(Party.HOST, "host", f"{shown} ({why})")
        others = _others(failure, evidence, _same_line)
        denial = bool(PULL_DENIAL.search(failure.text))
        if denial and _image_ran(failure.image, evidence.served_on):
            return Blame(Party.HOST, "host", f"{shown} (the registry served the image elsewhere)")
        if others:
            why = f"the same failure on {len(others) + 1} machines and on none did it run"
            cause = "pull_denied" if denial else "repeated_fatal"
            return Blame(Party.CAMPAIGN, cause, f"{failure.image}: {why}: {shown}")
        if denial:
            why = f"the registry refused {failure.image} (a second machine decides)"
            return Blame(Party.SUSPECT, "pull_denied", f"{why}: {shown}")
        return Blame(Party.HOST, "host", shown)
    # a job: the same exit and last line on two machines, and that job never finished anywhere
    if (failure.image, failure.job or "") in evidence.jobs_ok or HOST_SIGNATURE.search(
        failure.text
    ):
        return Blame(Party.HOST, "host", f"job {failure.job} failed on this host: {shown}")
    others = _others(failure, evidence, _same_line)
    if others:
        why = f"job {failure.job} failed the same way on {len(others) + 1} machines"
        return Blame(Party.CAMPAIGN, "repeated_job", f"{why} (exit {failure.exit_code}): {shown}")
    return Blame(Party.SUSPECT, "repeated_job", f"job {failure.job} failed: {shown}")


@dataclass(frozen=True)
class BlameView:
    """What the blame book knows, as the rules read it."""

    image: str
    evidence: Evidence = field(default_factory=Evidence)
    fault: str | None = None  # the campaign fault's reason, once proven
    pull_in_doubt: bool = False
    spared: frozenset[int] = frozenset()  # instances whose hosts are not blamed
