"""Campaign files (TOML): what to rent, how many, within what budget. See docs/campaigns.md."""

from __future__ import annotations

import difflib
import math
import posixpath
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from typing import Any

from .errors import ConfigError, ConfigErrors, problems_of

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
RENTALS = ("on-demand", "interruptible", "auto")
SECRET_HINTS = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)
# an offer filter: `{field: {op: value}}`, what a market's search takes
OfferTerms = dict[str, dict[str, Any]]
# a market's reader of its own query language (the text a campaign's `offer_query` holds): the
# terms it means, or ConfigError
QueryReader = Callable[[str], OfferTerms]


@dataclass(frozen=True)
class Job:
    name: str
    run: str
    workdir: str = "."
    env: dict[str, str] = field(default_factory=dict)
    artifacts: tuple[str, ...] = ()
    timeout_s: float = 6 * 3600.0
    retries: int = 1
    checkpoint: str | None = None  # a path the job writes; pulled while it runs, pushed to a retry
    checkpoint_every_s: float = 600.0
    secret_env: tuple[str, ...] = ()  # env names the operator allowed despite looking secret
    # the job's size: how long it takes on a reference GPU (both or neither)
    ref_gpu: str | None = None
    ref_hours: float | None = None


@dataclass(frozen=True)
class Campaign:
    name: str
    image: str
    image_cuda: float
    disk_gb: float
    offer_query: OfferTerms
    max_dph: float
    fleet: int
    max_creates: int
    budget_usd: float
    deadline_min: float | None = None
    poll_s: float = 10.0  # market seconds between polls
    # wall seconds one market call may take, whole answer included (None: the client's default,
    # which `--http-timeout` sets); a slow market or a long list page may need more
    http_timeout_s: float | None = None
    policy: dict[str, Any] = field(default_factory=dict)
    jobs: tuple[Job, ...] = ()
    rental: str = "on-demand"  # one of RENTALS: how its offers are rented
    # the highest bid ($/h) the interruptible tier may place or raise to (None: under the
    # same machine's on-demand price, and under max_dph)
    max_bid_dph: float | None = None
    notify: tuple[str, ...] = ()  # where notices go (apprise URLs)
    # where jobs' artifacts and checkpoints land (None: the user data directory's artifacts/)
    artifacts_dir: str | None = None
    # local files and folders pushed over SFTP into each job's workdir on a proven host before
    # its first job there (relative paths: from the campaign file's folder)
    upload: tuple[str, ...] = ()


def renting_nothing(name: str) -> Campaign:
    """A campaign with no fleet and no creates that no budget rule ends: `watch` without a
    campaign file, and the bare session of `rentwatch end`."""
    return Campaign(
        name=name,
        image="",
        image_cuda=0.0,
        disk_gb=10,
        offer_query={},
        max_dph=0.0,
        fleet=0,
        max_creates=0,
        budget_usd=1e9,
    )


MAX_UPLOADS = 64
NUMBER = (int, float)
Kind = type | tuple[type, ...]
Check = Callable[[Any], list[str]]  # a value's problems
Fail = Callable[[str, str], ConfigError]  # the error of a key, with why


def _must(ok: Callable[[Any], object], why: str) -> Check:
    """A check that says `why` (formatted with the value) where `ok` refuses the value."""
    return lambda v: [] if ok(v) else [why.format(v)]


def _within(lo: float, hi: float, open_lo: bool = True) -> Check:
    """A number's check: finite, above `lo` (at least it where not `open_lo`), at most `hi`."""

    def problems(v: float) -> list[str]:
        if not math.isfinite(v):
            return [f"must be a finite number, got {v!r}"]
        if v < lo or (open_lo and v == lo) or v > hi:
            return [f"must be {'above' if open_lo else 'at least'} {lo:g} and at most {hi:g}"]
        return []

    return problems


def _anything(_: object) -> list[str]:
    return []  # no check beyond the key's type


def _cuda_version(v: str | float) -> bool:
    try:
        return 0 <= float(v) <= 100  # NaN compares false
    except ValueError:
        return False


def _strings(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(s, str) for s in v)


def _text(v: object) -> bool:
    return isinstance(v, str) and bool(v.strip())


def _relative(v: object) -> bool:
    return isinstance(v, str) and inside_job_folder(v)


def _artifacts(v: Any) -> list[str]:
    """Paths the pull takes, refused here, before anything is rented, not at the job's end."""
    if not _strings(v):
        return ["expected a list of paths"]
    return [f"{a!r} is not a relative path inside the job's folder" for a in v if not _relative(a)]


# a campaign file's plain keys: their TOML type, default (...: required) and check; offer_query,
# max_creates, policy and jobs are read on their own
FIELDS: dict[str, tuple[Kind, Any, Check]] = {
    "name": (str, ..., _must(NAME.fullmatch, "use letters, digits, '.', '_' or '-' (at most 64)")),
    "image": (
        str,
        ...,
        _must(
            lambda v: v.strip() and len(v) <= 512,
            "an image reference is required (at most 512 characters)",
        ),
    ),
    "image_cuda": ((str, int, float), "0", _must(_cuda_version, "not a version number: {!r}")),
    "disk_gb": (NUMBER, 20, _within(1, 2000, open_lo=False)),
    "max_dph": (NUMBER, ..., _within(0, 1000)),
    "fleet": (int, 1, _must(lambda v: 1 <= v <= 10_000, "must be between 1 and 10000")),
    "budget_usd": (NUMBER, ..., _within(0, 1e9)),
    "deadline_min": (NUMBER, None, _within(0, 1e12)),
    "poll_s": (NUMBER, 10.0, _within(0, 86_400)),
    "http_timeout_s": (NUMBER, None, _within(0, 3600)),
    "rental": (
        str,
        "on-demand",
        _must(RENTALS.__contains__, f"expected one of {', '.join(RENTALS)}, got {{!r}}"),
    ),
    # a bid is the machine's price, capped at $32/h per GPU: 256 on an 8-GPU machine
    "max_bid_dph": (NUMBER, None, _within(0.001, 256.0)),
    "notify": (
        list,
        [],
        _must(lambda v: all(map(_text, v)), "expected a list of notification URLs (strings)"),
    ),
    "artifacts_dir": (str, None, _must(str.strip, "expected a folder path, got an empty string")),
    "upload": (
        list,
        [],
        _must(
            lambda v: len(v) <= MAX_UPLOADS and all(_text(u) and "\0" not in u for u in v),
            f"expected a list of up to {MAX_UPLOADS} local paths (strings)",
        ),
    ),
}
# a job's keys but its name (object: the check says what a wrong type is)
JOB_FIELDS: dict[str, tuple[Kind, Any, Check]] = {
    "run": (object, "", _must(_text, "a command is required")),
    "env": (
        object,
        {},
        _must(
            lambda v: isinstance(v, dict) and _strings([*v.values()]), "expected a table of strings"
        ),
    ),
    "allow_secret_env": (object, [], _must(_strings, "expected a list of env names")),
    "checkpoint": (object, None, _must(_relative, "a relative path inside the job's folder")),
    "artifacts": (object, [], _artifacts),
    "ref_gpu": (object, None, _must(_text, 'a GPU name, e.g. "RTX 4090"')),
    "ref_hours": (NUMBER, None, _within(0, 10_000)),
    "retries": (int, 1, _must(lambda v: 0 <= v <= 1000, "must be between 0 and 1000")),
    "workdir": (str, ".", _anything),
    "timeout_min": (NUMBER, 360, _within(0, 100 * 24 * 60)),
    "checkpoint_every_min": (NUMBER, 10, _within(0, 24 * 60)),
}
JOB_KEYS = frozenset({"name", *JOB_FIELDS})


def _read(
    raw: Mapping[str, Any],
    fail: Fail,
    key: str,
    kind: Kind,
    default: Any = ...,
    check: Check = _anything,
) -> Any:
    """`key`'s value in `raw` (`default` where it is left out), else ConfigError from `fail`."""
    if key not in raw:
        if default is ...:
            raise fail(key, "is required")
        value = default
    else:
        value = raw[key]
        if kind is not object and (isinstance(value, bool) or not isinstance(value, kind)):
            # TOML's true is no number
            raise fail(key, f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
    if value is None:  # an optional key left out
        return None
    value = float(value) if kind is NUMBER else value
    whys = check(value)
    if whys:
        raise ConfigErrors(key, [str(fail(key, why)) for why in whys])
    return value


def _keeping(problems: list[str], read: Callable[..., Any], *args: Any) -> Any:
    """What `read` returns, or None with its problems added to `problems`."""
    try:
        return read(*args)
    except ConfigError as exc:
        problems.extend(problems_of(exc))
        return None


def _line_of(text: str, key: str) -> str:
    """Where `key` is set at the top level: `key = ...`, or a `[key]` / `[[key]]` header."""
    for i, line in enumerate(text.splitlines(), 1):
        k = re.escape(key)
        if re.match(rf"\s*{k}\s*=", line) or re.match(rf"\s*\[\[?\s*{k}\s*\]", line):
            return f"line {i}: "
    return ""


def unknown_key(key: str, known: frozenset[str] | set[str]) -> str:
    """An unknown key's message: the likeliest meant key first (a typo: `rnu`, `[[job]]`),
    then every key that is known."""
    near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    hint = f"did you mean {near[0]!r}? " if near else ""
    return f"unknown key: {hint}(known: {', '.join(sorted(known))})"


def _job_line_of(text: str, index: int, key: str) -> str:
    """The line of `key` in the `index`-th `[[jobs]]` table (its header's where the key is
    not there): a job's error points at the job, not at the campaign's own `name`."""
    seen, header = -1, 0
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(r"\s*\[", line):
            if seen == index:
                break
            if re.match(r"\s*\[\[\s*jobs\s*\]\]", line):
                seen += 1
                header = i
            continue
        if seen == index and re.match(rf"\s*{re.escape(key)}\s*=", line):
            return f"line {i}: "
    return f"line {header}: " if seen >= index and header else ""


def parse_campaign(text: str, source: str, read_query: QueryReader) -> Campaign:
    """The campaign `text` says, its `offer_query` read by `read_query`; else ConfigErrors with
    every problem of the file, each with its line, its key and why."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None

    def fail(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {_line_of(text, key.split('.')[-1])}{key}: {msg}")

    def read_offer_query() -> OfferTerms:
        query_text = _read(data, fail, "offer_query", (str, dict), "")
        try:
            return read_query(query_text) if isinstance(query_text, str) else dict(query_text)
        except ConfigError as exc:
            raise fail("offer_query", str(exc)) from None

    def read_policy() -> dict[str, Any]:
        if isinstance(data.get("policy"), str):  # `policy = "seed"`: the preset is a flag
            raise fail(
                "policy",
                f"[policy] is a table of settings to override; choose the policy itself with "
                f"--policy {data['policy']!r}",
            )
        policy: dict[str, Any] = _read(data, fail, "policy", dict, {})
        from .policy import DEFAULT  # every preset has the same settings: checked once here

        try:
            DEFAULT.with_overrides(policy)
        except ConfigError as exc:
            raise ConfigErrors(source, [f"{source}: {p}" for p in problems_of(exc)]) from None
        return policy

    def read_max_creates() -> int:
        fleet = got["fleet"] or 1
        why = f"must be at least the fleet size ({fleet}), at most 1000000"
        return int(
            _read(data, fail, "max_creates", int, 40, _must(lambda n: fleet <= n <= 1e6, why))
        )

    readers = {
        "offer_query": read_offer_query,
        "max_creates": read_max_creates,
        "policy": read_policy,
    }
    known = [f.name for f in fields(Campaign)]  # the file's keys are the fields, read in order
    problems = [str(fail(key, unknown_key(key, set(known)))) for key in data if key not in known]
    got: dict[str, Any] = {}
    for key in (k for k in known if k != "jobs"):
        read = readers.get(key) or partial(_read, data, fail, key, *FIELDS[key])
        got[key] = _keeping(problems, read)
    jobs: list[Job] = []
    for i, raw in enumerate(_keeping(problems, _read, data, fail, "jobs", list, []) or []):
        if not isinstance(raw, dict):
            problems.append(str(fail("jobs", f"jobs[{i}] is not a table")))
        elif (job := _keeping(problems, _job, raw, i, _job_fail(text, source, i))) is not None:
            jobs.append(job)
    names = [j.name for j in jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        again = next(k for k, n in enumerate(names) if n in names[:k])
        why = f"job names must be unique; repeated: {', '.join(dup)}"
        problems.append(str(_job_fail(text, source, again)("name", why)))
    clash = shared_checkpoint(jobs)
    if clash is not None:
        a, b, path = clash
        why = (
            f"jobs {a} and {b} share the checkpoint folder {path!r} on a host: one would resume "
            "from the other's state (give each job its own checkpoint or workdir)"
        )
        problems.append(str(fail("checkpoint", why)))
    if problems:
        raise ConfigErrors(source, problems)
    got.update(
        image_cuda=float(got["image_cuda"]),
        notify=tuple(got["notify"]),
        upload=tuple(got["upload"]),
    )
    return Campaign(**got, jobs=tuple(jobs))


def inside_job_folder(path: str) -> bool:
    """An artifact path the pull takes (engine/jobs/runner.py `safe_relative` holds each path a
    host names to it): relative, no backslash or NUL, and not leaving the folder once normalised."""
    if not path or path.startswith(("/", "~")) or "\\" in path or "\x00" in path:
        return False
    norm = posixpath.normpath(path)
    return norm != ".." and not norm.startswith("../")


def home_path(workdir: str, path: str) -> str:
    """`path` under `workdir` as a path from the login folder (a relative workdir starts there)."""
    out = posixpath.normpath(posixpath.join(workdir, path))
    return out[2:] or "." if out == "~" or out.startswith("~/") else out


def shared_checkpoint(jobs: list[Job]) -> tuple[str, str, str] | None:
    """Two jobs whose checkpoint folders are one or nested, on a host that runs both in turn (the
    first such pair): the later job would start from the earlier one's state."""
    seen: list[tuple[str, str]] = []
    for job in jobs:
        if job.checkpoint is None:
            continue
        mine = home_path(job.workdir, job.checkpoint.rstrip("/"))
        for name, other in seen:
            inner, outer = sorted((mine, other), key=len, reverse=True)
            under = outer == "." and not inner.startswith("/")  # the login folder holds it
            if inner == outer or inner.startswith(outer.rstrip("/") + "/") or under:
                return name, job.name, outer
        seen.append((job.name, mine))
    return None


def _job_fail(text: str, source: str, index: int) -> Fail:
    """The error of the `index`-th job's `key`, at its line, naming the job and the key."""
    return lambda key, msg: ConfigError(
        f"{source}: {_job_line_of(text, index, key)}jobs[{index}].{key}: {msg}"
    )


def _job(raw: dict[str, Any], i: int, fail: Fail) -> Job:
    """The `i`-th job; else ConfigErrors with every problem of it, each at its key's line."""
    problems = [str(fail(key, unknown_key(key, JOB_KEYS))) for key in sorted(set(raw) - JOB_KEYS)]

    def bad(key: str, msg: str) -> None:
        problems.append(str(fail(key, msg)))

    jname = raw.get("name", f"job-{i + 1}")
    if not isinstance(jname, str) or not NAME.fullmatch(jname):
        bad("name", "letters, digits, '.', '_' or '-' (it names a folder)")
        jname = f"job-{i + 1}"
    if jname in (".", ".."):
        bad("name", f"{jname!r} is not a folder name")
    got = {key: _keeping(problems, _read, raw, fail, key, *row) for key, row in JOB_FIELDS.items()}
    env, allowed = got["env"] or {}, got["allow_secret_env"] or []
    secret = [k for k in env if SECRET_HINTS.search(k) and k not in allowed]
    if secret:
        bad(
            "env",
            f"{', '.join(secret)} looks like a secret; nothing secret "
            "is pushed onto a stranger's host (pull artifacts off instead, or name it in "
            "allow_secret_env to opt in, which the ledger records)",
        )
    ref_gpu, ref_hours = raw.get("ref_gpu"), raw.get("ref_hours")
    if (ref_gpu is None) != (ref_hours is None):
        missing = "ref_hours" if ref_hours is None else "ref_gpu"
        bad(missing, "ref_gpu and ref_hours size a job together")
    if problems:
        raise ConfigErrors(f"jobs[{i}]", problems)
    return Job(
        name=jname,
        run=got["run"],
        workdir=got["workdir"],
        env=env,
        artifacts=tuple(got["artifacts"]),
        timeout_s=got["timeout_min"] * 60,
        retries=got["retries"],
        checkpoint=got["checkpoint"],
        checkpoint_every_s=got["checkpoint_every_min"] * 60,
        secret_env=tuple(k for k in env if k in allowed),
        ref_gpu=got["ref_gpu"].strip() if got["ref_gpu"] else None,
        ref_hours=got["ref_hours"],
    )
