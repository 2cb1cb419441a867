"""What rentwatch tells a person, as values: the `Notice`, its level, the wording of each kind in
one table (a title and a body: what happened, what rentwatch did, what the person may do), and
`scrub`, which every notice passes through before it leaves the process. Pure.
`DEFAULT_MIN_LEVEL` is `notice`: routine work wakes nobody."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..core.text import clean
from .wording import FIELD_LIMIT, cap, duration, plural, redact, released, safe

LEVELS: Final = ("info", "notice", "warning", "critical")
DEFAULT_MIN_LEVEL: Final = "notice"

TITLE_LIMIT: Final = 120
BODY_LIMIT: Final = 2000
LINE_LIMIT: Final = 300
# shorter "secrets" would blank ordinary words; a real key, token or key path is never this short
MIN_SECRET_LEN: Final = 6


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


@dataclass(frozen=True)
class Wording:
    """One kind of notice: its level and its sentences, `str.format` templates over the facts a
    caller gives (`notice`) and the clauses `_clauses` derives from them."""

    level: str
    title: str
    happened: str
    did: str
    todo: str


WORDING: Final[Mapping[str, Wording]] = {
    "campaign_fault": Wording(
        "critical",
        "{campaign}: campaign fault, {what}; creates stopped",
        "Every host failed the same way with {what}: {cause}.",
        "Stopped creating new instances. Hosts were not blamed or quarantined for it.",
        "Check {what} (name, registry access, what it carries), fix the campaign file and start "
        "the campaign again.",
    ),
    "budget_80": Wording(
        "warning",
        "{campaign}: 80% of budget spent (${spent_usd:.2f} of ${budget_usd:.2f})",
        "The ledger shows ${spent_usd:.2f} spent of the ${budget_usd:.2f} budget.",
        "Nothing yet: the campaign goes on; at 100% it stops creating.",
        "Raise `budget_usd` if the work is worth it, or end the campaign.",
    ),
    "budget_100": Wording(
        "critical",
        "{campaign}: budget spent (${spent_usd:.2f} of ${budget_usd:.2f})",
        "The ledger shows ${spent_usd:.2f} spent, at or over the ${budget_usd:.2f} budget.",
        "Stopped creating.",
        "Pull what you need from stopped instances (storage still bills) and end the campaign, "
        "or raise `budget_usd` and start it again.",
    ),
    # a verified instance stopped delivering (exited, unreachable, stopped by the market)
    "host_lost": Wording(
        "warning",
        "{campaign}: verified instance {instance_id} lost",
        "Verified instance {instance_id} was lost: {reason}.",
        "Stopped it (nothing destroyed: it had passed preflight) and went on with the fleet.",
        "Pull any artifacts still on it, then end or destroy it yourself.",
    ),
    "xid_stop": Wording(
        "warning",
        "{campaign}: instance {instance_id} stopped, fatal XID {xid}",
        "The GPU of instance {instance_id} reported fatal XID {xid}.",
        "Stopped the instance and quarantined its machine for this campaign.",
        "Nothing, unless the job's artifacts on it matter: pull them, then destroy it.",
    ),
    "host_offline": Wording(
        "warning",
        "{campaign}: host of instance {instance_id} offline",
        "The market reports the host of instance {instance_id} offline. GPU time does not bill "
        "while offline; storage does not either.",
        "Kept watching it; its work is replaced on another host if it stays away.",
        "Nothing unless it holds artifacts you need; the market may bring it back.",
    ),
    "outbid": Wording(
        "warning",
        "{campaign}: instance {instance_id} outbid",
        "Interruptible instance {instance_id} was outbid and stopped by the market.{job_clause}",
        "Moved its work to the next host, from its last checkpoint where it has one.",
        'Raise the bid or use `rental = "on-demand"` if outbids keep costing work.',
    ),
    "key_refused": Wording(
        "critical",
        "{campaign}: the market refused the API key",
        "The market refused rentwatch's API key{detail_clause}",
        "Stopped creating. Instances already running go on billing and cannot be stopped from "
        "here until the key works again.",
        "Check the key (revoked, expired, missing scope) in the Vast console and restart the "
        "controller with a working one; stop instances from the console meanwhile.",
    ),
    "market_unreachable": Wording(
        "critical",
        "{campaign}: market unreachable for {since}",
        "The market has not answered for {since}: {error}.",
        "Kept retrying. {held} instance(s) held go on billing, unsupervised; their host "
        "watchdogs stop them if the controller's heartbeat goes silent.",
        "Check the network and the market's status page; stop instances from the console if "
        "this lasts.",
    ),
    # a signal or an unhandled error: what it held stopped, what never proved itself destroyed
    "controller_trapped": Wording(
        "critical",
        "{campaign}: controller trapped ({signal}), {stopped} stopped, {destroyed_title}{left} left",
        "The controller was interrupted by {signal}.",
        "{released}{left_tail}",
        "Check the console for anything still running{stop_it}; start the controller again to "
        "adopt what remains.",
    ),
    "controller_exit": Wording(
        "critical",
        "{campaign}: controller exiting, {reason}",
        "The controller is exiting before the campaign's end: {reason}.",
        "{released}",
        "Read the reason, fix what it names and start the controller again; it adopts what is "
        "still there.",
    ),
    "job_failed": Wording(
        "warning",
        "{campaign}: job {job} failed for good after {attempts} tries",
        "Job {job} failed {attempts} time(s); last: {last_error}.",
        "Gave up on it; the other jobs go on and its hosts stay held for them.",
        "Read the job's log (rentwatch ledger), fix the command and add it again.",
    ),
    # the receipt's figures as given: duds and, apart, the rentals that never delivered through
    # no fault of their hosts
    "campaign_end": Wording(
        "notice",
        "{campaign}: done, ${spent_usd:.2f} spent, {rate}",
        "The campaign ended: {counts}, ${spent_usd:.2f} spent, {rate}{jobs}.",
        "{released}",
        "Read the full receipt with `rentwatch receipt`; destroy what you no longer need "
        "(stopped instances bill storage).",
    ),
}


def _clauses(f: Mapping[str, Any]) -> dict[str, str]:
    """The clauses a sentence says only when their facts are given."""
    stopped, destroyed, left, apart = (
        f.get(k, 0) for k in ("stopped", "destroyed", "left", "apart")
    )
    rate, jobs = f.get("usd_per_gpu_hour"), f.get("jobs_finished")
    counts = f"{plural(f.get('creates', 0), 'create')}, {plural(f.get('duds', 0), 'dud')}"
    return {
        "what": f"image {f['image']}" if f.get("image") else "the campaign",
        "job_clause": f" It was running job {f['job']}." if f.get("job") else "",
        "detail_clause": f": {f['detail']}." if f.get("detail") else ".",
        "since": duration(f.get("since_s", 0)),
        "released": released(stopped, destroyed),
        "destroyed_title": f"{destroyed} destroyed, " if destroyed else "",
        "left_tail": f" {left} could not be stopped and may still bill."
        if left
        else " Nothing it held is left running.",
        "stop_it": " and stop it" if left else "",
        "rate": f"${rate:.2f}/GPU-h" if rate is not None else "no GPU-h",
        "jobs": f", {jobs} job(s) finished" if jobs is not None else "",
        "counts": counts
        + (f" (and {apart} more never delivered: outbid or cancelled)" if apart else ""),
    }


def notice(kind: str, campaign: str, **facts: Any) -> Notice:
    """The notice of `kind` about `campaign`, `WORDING[kind]` filled with `facts` (text a host or
    the market controls made safe first). Repeats share a key: the kind, the campaign, and the
    instance or job it is about."""
    w = WORDING[kind]
    about = facts.get("instance_id", facts.get("job"))
    key = f"{kind}:{campaign}" + ("" if about is None else f":{about}")
    f = {k: safe(v) if isinstance(v, str) else v for k, v in facts.items()}
    f |= _clauses(f) | {"campaign": safe(campaign)}
    body = f"What happened: {w.happened}\nWhat rentwatch did: {w.did}\nWhat you may want to do: {w.todo}"
    return Notice(
        kind=kind,
        level=w.level,
        title=cap(clean(w.title.format(**f), limit=TITLE_LIMIT + 1), TITLE_LIMIT),
        body=scrub(body.format(**f)),
        key=cap(clean(key, limit=FIELD_LIMIT * 2), FIELD_LIMIT * 2),
    )
