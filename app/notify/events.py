"""What rentwatch tells a person, as values: the `Notice`, its level, one builder per event kind,
and `scrub`, which every notice passes through before it leaves the process. Pure.

Each builder writes a title and a body (what happened, what rentwatch did, what the person may
do) from figures the caller passes in. `DEFAULT_MIN_LEVEL` is `notice`: routine work wakes
nobody."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from ..core.text import clean
from . import wording
from .wording import FIELD_LIMIT, cap, duration, job_clause, redact, safe

LEVELS: Final = ("info", "notice", "warning", "critical")
DEFAULT_MIN_LEVEL: Final = "notice"

TITLE_LIMIT: Final = 120
BODY_LIMIT: Final = 2000
LINE_LIMIT: Final = 300
# shorter "secrets" would blank ordinary words; a real key, token or key path is never this short
MIN_SECRET_LEN: Final = 6

DEFAULT_LEVELS: Final[Mapping[str, str]] = {
    "campaign_fault": "critical",
    "budget_80": "warning",
    "budget_100": "critical",
    "host_lost": "warning",
    "xid_stop": "warning",
    "host_offline": "warning",
    "outbid": "warning",
    "key_refused": "critical",
    "market_unreachable": "critical",
    "controller_trapped": "critical",
    "controller_exit": "critical",
    "job_failed": "warning",
    "campaign_end": "notice",
}


@dataclass(frozen=True)
class Notice:
    """One message for a person. `key` names what repeats of the same news share (the notifier
    folds notices with one key inside its window); None: never folded."""

    kind: str
    level: str
    title: str
    body: str
    key: str | None = None


def level_rank(level: str) -> int:
    """Position of `level` in `LEVELS`; ValueError naming the known ones otherwise."""
    try:
        return LEVELS.index(level)
    except ValueError:
        raise ValueError(
            f"unknown notify level {level!r}; use one of {', '.join(LEVELS)}"
        ) from None


def should_send(notice: Notice, min_level: str) -> bool:
    return level_rank(notice.level) >= level_rank(min_level)


def scrub(text: object, secrets: Iterable[str | None] = (), limit: int = BODY_LIMIT) -> str:
    """`text` safe to send: every secret given replaced by `[redacted]`, escapes and control
    characters removed line by line, each line and the whole capped. Secrets are removed before
    and after cleaning (so `ab\x1b[0mcd` cannot reappear) and before any cap (so a cut never
    leaves half a secret)."""
    wanted = sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True)
    s = redact("" if text is None else str(text), wanted)
    lines = [clean(line, limit=len(line) + 1) for line in s.splitlines()]
    s = redact("\n".join(lines), wanted)
    lines = [cap(line, LINE_LIMIT) for line in s.split("\n")]
    return cap("\n".join(lines).strip("\n"), limit)


def campaign_fault(campaign: str, cause: str, *, image: str | None = None) -> Notice:
    """Every host failed the same way: the campaign's image or job is at fault, not the hosts."""
    what = f"image {safe(image)}" if image else "the campaign"
    return _notice(
        "campaign_fault",
        campaign,
        f"{safe(campaign)}: campaign fault, {what}; creates stopped",
        happened=f"Every host failed the same way with {what}: {safe(cause)}.",
        did="Stopped creating new instances. Hosts were not blamed or quarantined for it.",
        todo=f"Check {what} (name, registry access, what it carries), fix the campaign file "
        "and start the campaign again.",
    )


def budget_80(campaign: str, spent_usd: float, budget_usd: float) -> Notice:
    """Spend crossed 80% of the campaign's budget."""
    return _notice(
        "budget_80",
        campaign,
        f"{safe(campaign)}: 80% of budget spent (${spent_usd:.2f} of ${budget_usd:.2f})",
        happened=f"The ledger shows ${spent_usd:.2f} spent of the ${budget_usd:.2f} budget.",
        did="Nothing yet: the campaign goes on; at 100% it stops creating.",
        todo="Raise `budget_usd` if the work is worth it, or end the campaign.",
    )


def budget_100(campaign: str, spent_usd: float, budget_usd: float) -> Notice:
    """Spend reached the campaign's budget."""
    return _notice(
        "budget_100",
        campaign,
        f"{safe(campaign)}: budget spent (${spent_usd:.2f} of ${budget_usd:.2f})",
        happened=f"The ledger shows ${spent_usd:.2f} spent, at or over the ${budget_usd:.2f} "
        "budget.",
        did="Stopped creating.",
        todo="Pull what you need from stopped instances (storage still bills) and end the "
        "campaign, or raise `budget_usd` and start it again.",
    )


def host_lost(campaign: str, instance_id: int, reason: str) -> Notice:
    """A verified instance stopped delivering (exited, unreachable, stopped by the market)."""
    return _notice(
        "host_lost",
        campaign,
        f"{safe(campaign)}: verified instance {instance_id} lost",
        happened=f"Verified instance {instance_id} was lost: {safe(reason)}.",
        did="Stopped it (nothing destroyed: it had passed preflight) and went on with the fleet.",
        todo="Pull any artifacts still on it, then end or destroy it yourself.",
        key=f"host_lost:{campaign}:{instance_id}",
    )


def xid_stop(campaign: str, instance_id: int, xid: int) -> Notice:
    """The GPU threw a fatal XID under load and rentwatch stopped the instance."""
    return _notice(
        "xid_stop",
        campaign,
        f"{safe(campaign)}: instance {instance_id} stopped, fatal XID {xid}",
        happened=f"The GPU of instance {instance_id} reported fatal XID {xid}.",
        did="Stopped the instance and quarantined its machine for this campaign.",
        todo="Nothing, unless the job's artifacts on it matter: pull them, then destroy it.",
        key=f"xid_stop:{campaign}:{instance_id}",
    )


def host_offline(campaign: str, instance_id: int) -> Notice:
    """The market reports a held instance's host offline."""
    return _notice(
        "host_offline",
        campaign,
        f"{safe(campaign)}: host of instance {instance_id} offline",
        happened=f"The market reports the host of instance {instance_id} offline. GPU time does "
        "not bill while offline; storage does not either.",
        did="Kept watching it; its work is replaced on another host if it stays away.",
        todo="Nothing unless it holds artifacts you need; the market may bring it back.",
        key=f"host_offline:{campaign}:{instance_id}",
    )


def outbid(campaign: str, instance_id: int, *, job: str | None = None) -> Notice:
    """An interruptible instance lost its bid."""
    return _notice(
        "outbid",
        campaign,
        f"{safe(campaign)}: instance {instance_id} outbid",
        happened=f"Interruptible instance {instance_id} was outbid and stopped by the market."
        + job_clause(job),
        did="Moved its work to the next host, from its last checkpoint where it has one.",
        todo='Raise the bid or use `rental = "on-demand"` if outbids keep costing work.',
        key=f"outbid:{campaign}:{instance_id}",
    )


def key_refused(campaign: str, detail: str = "") -> Notice:
    """The market refused the API key: nothing can be created, stopped or watched."""
    return _notice(
        "key_refused",
        campaign,
        f"{safe(campaign)}: the market refused the API key",
        happened="The market refused rentwatch's API key"
        + (f": {safe(detail)}." if detail else "."),
        did="Stopped creating. Instances already running go on billing and cannot be stopped "
        "from here until the key works again.",
        todo="Check the key (revoked, expired, missing scope) in the Vast console and restart "
        "the controller with a working one; stop instances from the console meanwhile.",
    )


def market_unreachable(campaign: str, error: str, *, since_s: float, held: int) -> Notice:
    """The market has not answered for a while: supervision is blind."""
    return _notice(
        "market_unreachable",
        campaign,
        f"{safe(campaign)}: market unreachable for {duration(since_s)}",
        happened=f"The market has not answered for {duration(since_s)}: {safe(error)}.",
        did=f"Kept retrying. {held} instance(s) held go on billing, unsupervised; their host "
        "watchdogs stop them if the controller's heartbeat goes silent.",
        todo="Check the network and the market's status page; stop instances from the console "
        "if this lasts.",
    )


def controller_trapped(
    campaign: str, signal_name: str, *, stopped: int, left: int, destroyed: int = 0
) -> Notice:
    """The controller caught a signal or an unhandled error and stopped what it held (and
    destroyed what never proved itself), as its stops and destroys were recorded."""
    tail = (
        f" {left} could not be stopped and may still bill."
        if left
        else " Nothing it held is left running."
    )
    return _notice(
        "controller_trapped",
        campaign,
        f"{safe(campaign)}: controller trapped ({safe(signal_name)}), {stopped} stopped, "
        + (f"{destroyed} destroyed, " if destroyed else "")
        + f"{left} left",
        happened=f"The controller was interrupted by {safe(signal_name)}.",
        did=f"{wording.released(stopped, destroyed)}{tail}",
        todo="Check the console for anything still running"
        + (" and stop it" if left else "")
        + "; start the controller again to adopt what remains.",
    )


def controller_exit(campaign: str, reason: str, *, stopped: int, destroyed: int = 0) -> Notice:
    """The controller is exiting for a reason other than the campaign's end."""
    return _notice(
        "controller_exit",
        campaign,
        f"{safe(campaign)}: controller exiting, {safe(reason, 80)}",
        happened=f"The controller is exiting before the campaign's end: {safe(reason)}.",
        did=wording.released(stopped, destroyed),
        todo="Read the reason, fix what it names and start the controller again; it adopts "
        "what is still there.",
    )


def job_failed(campaign: str, job: str, *, attempts: int, last_error: str) -> Notice:
    """A job failed on every try it was allowed."""
    return _notice(
        "job_failed",
        campaign,
        f"{safe(campaign)}: job {safe(job, 60)} failed for good after {attempts} tries",
        happened=f"Job {safe(job)} failed {attempts} time(s); last: {safe(last_error)}.",
        did="Gave up on it; the other jobs go on and its hosts stay held for them.",
        todo="Read the job's log (rentwatch ledger), fix the command and add it again.",
        key=f"job_failed:{campaign}:{job}",
    )


def campaign_end(
    campaign: str,
    *,
    creates: int,
    duds: int,
    spent_usd: float,
    usd_per_gpu_hour: float | None,
    jobs_finished: int | None = None,
    stopped: int = 0,
    destroyed: int = 0,
    apart: int = 0,
) -> Notice:
    """The campaign is done; the body carries the receipt's figures as given: duds and, apart, the
    rentals that never delivered through no fault of their hosts; what its end let go."""
    rate = f"${usd_per_gpu_hour:.2f}/GPU-h" if usd_per_gpu_hour is not None else "no GPU-h"
    jobs = f", {jobs_finished} job(s) finished" if jobs_finished is not None else ""
    counts = f"{wording.plural(creates, 'create')}, {wording.plural(duds, 'dud')}"
    if apart:
        counts += f" (and {apart} more never delivered: outbid or cancelled)"
    return _notice(
        "campaign_end",
        campaign,
        f"{safe(campaign)}: done, ${spent_usd:.2f} spent, {rate}",
        happened=f"The campaign ended: {counts}, ${spent_usd:.2f} spent, {rate}{jobs}.",
        did=wording.released(stopped, destroyed),
        todo="Read the full receipt with `rentwatch receipt`; destroy what you no longer need "
        "(stopped instances bill storage).",
    )


def _notice(
    kind: str, campaign: str, title: str, *, happened: str, did: str, todo: str, key: str = ""
) -> Notice:
    key = key or f"{kind}:{campaign}"  # what repeats of the same news share
    body = f"What happened: {happened}\nWhat rentwatch did: {did}\nWhat you may want to do: {todo}"
    return Notice(
        kind=kind,
        level=DEFAULT_LEVELS[kind],
        title=cap(clean(title, limit=TITLE_LIMIT + 1), TITLE_LIMIT),
        body=scrub(body),
        key=cap(clean(key, limit=FIELD_LIMIT * 2), FIELD_LIMIT * 2),
    )
