"""The compute preflight of a running attempt over SSH: its tries (a fresh nonce each), the probe's
verdict with the deeper checks, and whose fault a probe that could not run is."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ...core.blame.fault import Party, Stage, probe_blame
from ...core.campaign import Campaign
from ...core.policy import Policy
from ...core.preflight.checks import deep_checks, first_failure
from ...core.preflight.verdict import Verdict, preflight_verdict
from ...ledger import EventKind
from ...market.protocol import Clock
from ..attempt import Attempt
from ..blame_book import BlameBook
from ..journal import Journal
from ..updates import PreflightStarted, Set, SshFailed
from .link import HostLink
from .probe_io import (
    NET_PROBE_URL,
    ProbeError,
    bounded,
    failure_text,
    new_nonce,
    parse_probe_output,
    preflight_command,
    probe_run_text,
    probe_source,
)
from .ssh import HostKeyChanged, RunResult, SSHFailure

K = EventKind
SILENT_RETRIES = 3  # preflight sessions in a row without an answer before they count against it


def no_answer(res: RunResult) -> bool:
    """A session that ended without the host's answer: nothing on stdout (the probe always prints
    its JSON line) and no exit status or nothing on stderr either."""
    return (
        not res.truncated
        and not res.stdout.strip()
        and (res.exit_status is None or not res.stderr.strip())
    )


@dataclass(eq=False)
class PreflightRunner:
    link: HostLink
    journal: Journal
    policy: Policy
    clock: Clock
    campaign: Campaign  # its disk, which the preflight holds hosts to
    blame_book: BlameBook

    def _judge(self, a: Attempt, v: Verdict, doc: dict[str, Any] | None = None) -> Verdict:
        self.journal.writer.emit(
            Set(a, {"verdict": v} if doc is None else {"verdict": v, "preflight_doc": doc})
        )
        return v

    def start_preflight(self, a: Attempt) -> None:
        self.journal.writer.emit(PreflightStarted(a, self.clock.now()))
        self.journal.writer.emit(
            Set(a, {"preflight_task": asyncio.create_task(self._preflight(a))})
        )

    async def _preflight(self, a: Attempt) -> None:
        """The preflight's tries: whatever ends them without a verdict is `bad_probe`."""
        try:
            verdict, doc = await self._preflight_tries(a)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - supervision: every failure ends in a verdict
            why = f"preflight ended without a verdict: {failure_text(exc)}"
            self._preflight_failed(a, self._judge(a, Verdict(False, "bad_probe", why)), {})
            return
        if not verdict.ok and verdict.failure_class != "campaign_fault":
            # (the verdict's own document, else the last one the host answered with)
            self._preflight_failed(a, verdict, doc or a.preflight_doc or {})

    async def _preflight_tries(self, a: Attempt) -> tuple[Verdict, dict[str, Any] | None]:
        """The tries until a verdict, told as it is reached; the verdict and its document. What
        the host task reads of the attempt is what it told itself (`said`), not the attempt:
        its own updates are applied by the poll's task."""
        dropped = 0
        said: str | None = a.ssh_error
        while True:
            nonce = new_nonce()  # fresh for every try: an answer is to this run, none other
            command = preflight_command(self.policy.checks, NET_PROBE_URL, nonce)
            if a.ssh_host is None or a.ssh_port is None:
                said = "no SSH port published yet"
                self.journal.writer.emit(Set(a, {"ssh_error": said}))
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            if not dropped and (said is None or said.startswith("no SSH port")):
                said = f"no answer yet from {a.ssh_host}:{a.ssh_port}"
                self.journal.writer.emit(Set(a, {"ssh_error": said}))
            try:
                script = probe_source("preflight")
                res = await self.link.probe(
                    a, script, self.link.wall(self.policy.preflight_timeout_s, 5.0), command
                )
            except HostKeyChanged as exc:
                return self._judge(a, Verdict(False, "host_key_changed", str(exc))), None
            except SSHFailure as exc:
                if "did not finish" in str(exc):
                    return self._judge(a, Verdict(False, "timeout", f"preflight hung: {exc}")), None
                said = str(exc)
                self.journal.writer.emit(SshFailed(a, said))
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            except OSError as exc:
                # the controller's own side (out of descriptors, say): no word on the host;
                # tried again until the preflight's deadline rule gives up on the attempt
                said = f"controller could not try: {failure_text(exc)}"
                self.journal.writer.emit(SshFailed(a, said))
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            said = None
            self.journal.writer.emit(Set(a, {"ssh_error": None}))
            if no_answer(res) and (res.exit_status is None or dropped < SILENT_RETRIES):
                # a session cut before the probe answered says nothing about the host: look
                # again. A cut channel is retried until the SSH deadline rule gives up on the
                # host; a clean exit with nothing said at all is judged after a few tries.
                dropped += 1
                silent = res.exit_status is None and dropped >= SILENT_RETRIES
                why = f"{dropped} preflight sessions in a row ended without an answer"
                said = why if silent else said
                self.journal.writer.emit(SshFailed(a, why if silent else None))
                await asyncio.sleep(self.link.wall(10, 0.05))
                continue
            self.journal.writer.emit(Set(a, {"ssh_failures": 0}))
            if fault := self._campaign_fault(a, res.exit_status, res.stdout, res.stderr):
                return fault, None
            try:
                doc = parse_probe_output(res.stdout, "preflight", res.truncated)
            except ProbeError as exc:
                return self._judge(a, Verdict(False, "bad_probe", str(exc))), None
            verdict = preflight_verdict(
                doc,
                a.gpu_name,
                self.policy.min_speed_share,
                self.policy.check_gpu_name,
                checks=self.policy.checks,
                nonce=nonce,
            )
            self._judge(a, verdict, doc)
            if verdict.ok:
                self.blame_book.probe_passed(a)  # the image has what the probe needs
                verdict = self._deep_checks(a, doc, verdict)
            return verdict, doc

    def _preflight_failed(self, a: Attempt, verdict: Verdict, doc: dict[str, Any]) -> None:
        self.journal.fact(
            K.PREFLIGHT_FAILED,
            a,
            actor="rule:preflight",
            reason=verdict.reason,
            ok=False,
            detail={
                "class": verdict.failure_class,
                "tflops": verdict.tflops,
                "probe": bounded({k: doc.get(k) for k in ("device", "matmul", "error", "total_s")}),
            },
        )

    def _campaign_fault(
        self, a: Attempt, exit_status: int | None, stdout: bytes, stderr: bytes
    ) -> Verdict | None:
        """The probe could not run for what looks like the image's lack, judged on the campaign's
        evidence (core/blame/fault.py): the host spared while the image is in doubt, the host's
        own fault once a preflight with the image computed elsewhere. The verdict, if so."""
        text = probe_run_text(stdout, stderr)
        if text is None or probe_blame(text, exit_status) is None:
            return None
        found = self.blame_book.judge(a, Stage.PROBE, text, exit_status)
        if found.party is Party.HOST:
            return self._judge(a, Verdict(False, "bad_probe", found.reason))
        verdict = self._judge(a, Verdict(False, "campaign_fault", found.reason))
        self.journal.fact(
            K.PREFLIGHT_FAILED,
            a,
            actor="rule:blame",
            reason=found.reason,
            ok=False,
            detail={"class": "campaign_fault", "cause": found.cause, "blame": str(found.party)},
        )
        return verdict

    def _deep_checks(self, a: Attempt, doc: dict[str, object], v: Verdict) -> Verdict:
        """What one matmul does not exercise (PCIe link, VRAM, disk, download, XID), against
        the offer as listed: the first measured shortfall fails the host (its verdict)."""
        offer = a.offer
        listed = {
            "gpu_name": a.gpu_name,
            "gpu_ram": offer.gpu_ram_mb if offer else None,
            "disk_bw": offer.disk_bw if offer else None,
            "inet_down": offer.inet_down if offer else None,
        }
        bad = first_failure(deep_checks(doc, listed, self.campaign.disk_gb, self.policy.checks))
        if bad is None:
            return v
        failed = Verdict(False, bad.failure_class or bad.name, bad.reason, v.tflops, v.expected)
        return self._judge(a, failed)
