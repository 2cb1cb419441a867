"""Campaign files (TOML): what to rent, how many, within what budget. See docs/campaigns.md."""

from __future__ import annotations

import difflib
import math
import posixpath
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import ConfigError, ConfigErrors, problems_of

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
JOB_KEYS = frozenset(
    {
        "name",
        "run",
        "workdir",
        "env",
        "allow_secret_env",
        "artifacts",
        "timeout_min",
        "retries",
        "checkpoint",
        "checkpoint_every_min",
        "ref_gpu",
        "ref_hours",
    }
)
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
    """The campaign `text` says, its `offer_query` read by `read_query`; else ConfigError."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: {exc}") from None

    def fail(key: str, msg: str) -> ConfigError:
        return ConfigError(f"{source}: {_line_of(text, key.split('.')[-1])}{key}: {msg}")

    def get(key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in data:
            if default is ...:
                raise fail(key, "is required")
            return default
        value = data[key]
        if isinstance(value, bool) or not isinstance(value, kind):  # TOML's true is no number
            raise fail(key, f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
        return value

    known = {f.name for f in fields(Campaign)}  # the file's keys are the fields

    def number(
        key: str, default: Any = ..., *, lo: float = 0.0, hi: float = 1e12, open_lo: bool = True
    ) -> float | None:
        """`key`'s number, in range (None: an optional one left out)."""
        value = get(key, (int, float), default)
        if value is None:
            return None
        return _in_range(float(value), lo, hi, open_lo, lambda msg: fail(key, msg))

    def read_name() -> str:
        name = get("name", str)
        if not NAME.fullmatch(name):
            raise fail("name", "use letters, digits, '.', '_' or '-' (at most 64)")
        return str(name)

    def read_image() -> str:
        image = get("image", str)
        if not image.strip() or len(image) > 512:
            raise fail("image", "an image reference is required (at most 512 characters)")
        return str(image)

    def read_cuda() -> float:
        cuda_raw = get("image_cuda", (str, int, float), "0")
        try:
            return _in_range(float(cuda_raw), 0, 100, False, ValueError)
        except ValueError:
            raise fail("image_cuda", f"not a version number: {cuda_raw!r}") from None

    def read_offer_query() -> OfferTerms:
        query_text = get("offer_query", (str, dict), "")
        try:
            return read_query(query_text) if isinstance(query_text, str) else dict(query_text)
        except ConfigError as exc:
            raise fail("offer_query", str(exc)) from None

    def read_fleet() -> int:
        fleet = get("fleet", int, 1)
        if not 1 <= fleet <= 10_000:
            raise fail("fleet", "must be between 1 and 10000")
        return int(fleet)

    def read_max_creates() -> int:
        max_creates = get("max_creates", int, 40)
        if not got["fleet"] <= max_creates <= 1_000_000:
            raise fail(
                "max_creates", f"must be at least the fleet size ({got['fleet']}), at most 1000000"
            )
        return int(max_creates)

    def read_policy() -> dict[str, Any]:
        if isinstance(data.get("policy"), str):  # `policy = "seed"`: the preset is a flag
            raise fail(
                "policy",
                f"[policy] is a table of settings to override; choose the policy itself with "
                f"--policy {data['policy']!r}",
            )
        policy: dict[str, Any] = get("policy", dict, {})
        from .policy import DEFAULT  # every preset has the same settings: checked once here

        try:
            DEFAULT.with_overrides(policy)
        except ConfigError as exc:
            raise ConfigErrors(source, [f"{source}: {p}" for p in problems_of(exc)]) from None
        return policy

    def read_rental() -> str:
        rental = get("rental", str, "on-demand")
        if rental not in RENTALS:
            raise fail("rental", f"expected one of {', '.join(RENTALS)}, got {rental!r}")
        return str(rental)

    def read_notify() -> tuple[str, ...]:
        notify = get("notify", list, [])
        if not all(isinstance(n, str) and n.strip() for n in notify):
            raise fail("notify", "expected a list of notification URLs (strings)")
        return tuple(notify)

    def read_artifacts_dir() -> str | None:
        artifacts_dir = get("artifacts_dir", str, None)
        if artifacts_dir is not None and not artifacts_dir.strip():
            raise fail("artifacts_dir", "expected a folder path, got an empty string")
        return None if artifacts_dir is None else str(artifacts_dir)

    def read_upload() -> tuple[str, ...]:
        upload = get("upload", list, [])
        if len(upload) > MAX_UPLOADS or not all(
            isinstance(u, str) and u.strip() and "\0" not in u for u in upload
        ):
            raise fail("upload", f"expected a list of up to {MAX_UPLOADS} local paths (strings)")
        return tuple(upload)

    # every problem of the file, each with its key and why, not only the first
    problems: list[str] = []

    def check(read: Callable[[], Any], fallback: Any) -> Any:
        try:
            return read()
        except ConfigError as exc:
            problems.extend(problems_of(exc))
            return fallback

    for key in data:
        if key not in known:
            problems.append(str(fail(key, unknown_key(key, known))))
    got: dict[str, Any] = {}  # the campaign's fields, each as read (else its fallback)
    got["name"] = check(read_name, "")
    got["image"] = check(read_image, "")
    got["image_cuda"] = check(read_cuda, 0.0)
    got["disk_gb"] = check(lambda: number("disk_gb", 20, lo=1, hi=2000, open_lo=False), 20.0)
    got["offer_query"] = check(read_offer_query, {})
    got["max_dph"] = check(lambda: number("max_dph", hi=1000), 0.0)
    got["fleet"] = check(read_fleet, 1)
    got["max_creates"] = check(read_max_creates, got["fleet"])
    got["budget_usd"] = check(lambda: number("budget_usd", hi=1e9), 0.0)
    got["deadline_min"] = check(lambda: number("deadline_min", None), None)
    got["poll_s"] = check(lambda: number("poll_s", 10.0, hi=86_400), 10.0)
    got["http_timeout_s"] = check(lambda: number("http_timeout_s", None, hi=3600), None)
    got["policy"] = check(read_policy, {})
    got["rental"] = check(read_rental, "on-demand")
    # a bid is the machine's price, capped at $32/h per GPU: 256 on an 8-GPU machine
    got["max_bid_dph"] = check(lambda: number("max_bid_dph", None, lo=0.001, hi=256.0), None)
    got["notify"] = check(read_notify, ())
    got["artifacts_dir"] = check(read_artifacts_dir, None)
    got["upload"] = check(read_upload, ())
    jobs_raw: list[Any] = check(lambda: get("jobs", list, []), [])
    jobs: list[Job] = []
    for i, raw in enumerate(jobs_raw):
        if not isinstance(raw, dict):
            problems.append(str(fail("jobs", f"jobs[{i}] is not a table")))
            continue
        try:
            jobs.append(_job(raw, i, _job_fail(text, source, i)))
        except ConfigError as exc:
            problems.extend(problems_of(exc))
    names = [j.name for j in jobs]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        again = next(k for k, n in enumerate(names) if n in names[:k])
        problems.append(
            str(
                _job_fail(text, source, again)(
                    "name", f"job names must be unique; repeated: {', '.join(dup)}"
                )
            )
        )
    clash = shared_checkpoint(jobs)
    if clash is not None:
        a, b, path = clash
        problems.append(
            str(
                fail(
                    "checkpoint",
                    f"jobs {a} and {b} share the checkpoint folder {path!r} on a host: one "
                    "would resume from the other's state (give each job its own checkpoint or "
                    "workdir)",
                )
            )
        )
    if problems:
        raise ConfigErrors(source, problems)
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


def _in_range(
    value: float, lo: float, hi: float, open_lo: bool, error: Callable[[str], Exception]
) -> float:
    if not math.isfinite(value):
        raise error(f"must be a finite number, got {value!r}")
    if value < lo or (open_lo and value == lo) or value > hi:
        raise error(f"must be {'above' if open_lo else 'at least'} {lo:g} and at most {hi:g}")
    return value


def _job_fail(text: str, source: str, index: int) -> Callable[[str, str], ConfigError]:
    """The error of the `index`-th job's `key`, at its line, naming the job and the key."""
    return lambda key, msg: ConfigError(
        f"{source}: {_job_line_of(text, index, key)}jobs[{index}].{key}: {msg}"
    )


def _job(raw: dict[str, Any], i: int, fail: Callable[[str, str], ConfigError]) -> Job:
    """The `i`-th job; else ConfigErrors with every problem of it, each at its key's line."""
    problems: list[str] = []

    def bad(key: str, msg: str) -> None:
        problems.append(str(fail(key, msg)))

    def field_of(key: str, kind: type | tuple[type, ...], default: Any) -> Any:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, kind):
            bad(key, f"expected {getattr(kind, '__name__', 'a number')}")
            return default
        return value

    def number(key: str, default: float, hi: float) -> float:
        value = float(field_of(key, (int, float), default))
        try:
            return _in_range(value, 0, hi, True, lambda msg: fail(key, msg))
        except ConfigError as exc:
            problems.append(str(exc))
            return default

    for key in sorted(set(raw) - JOB_KEYS):
        bad(key, unknown_key(key, JOB_KEYS))
    jname = raw.get("name", f"job-{i + 1}")
    if not isinstance(jname, str) or not NAME.fullmatch(jname):
        bad("name", "letters, digits, '.', '_' or '-' (it names a folder)")
        jname = f"job-{i + 1}"
    if jname in (".", ".."):
        bad("name", f"{jname!r} is not a folder name")
    run = raw.get("run")
    if not isinstance(run, str) or not run.strip():
        bad("run", "a command is required")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        bad("env", "expected a table of strings")
        env = {}
    allowed = raw.get("allow_secret_env", [])
    if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
        bad("allow_secret_env", "expected a list of env names")
        allowed = []
    secret = [k for k in env if SECRET_HINTS.search(k) and k not in allowed]
    if secret:
        bad(
            "env",
            f"{', '.join(secret)} looks like a secret; nothing secret "
            "is pushed onto a stranger's host (pull artifacts off instead, or name it in "
            "allow_secret_env to opt in, which the ledger records)",
        )
    ckpt = raw.get("checkpoint")
    if ckpt is not None and (
        not isinstance(ckpt, str)
        or not ckpt
        or ckpt.startswith(("/", "~"))
        or ".." in ckpt.split("/")
    ):
        bad("checkpoint", "a relative path inside the job's folder")
    arts = raw.get("artifacts", [])
    if not isinstance(arts, list) or not all(isinstance(a, str) for a in arts):
        bad("artifacts", "expected a list of paths")
        arts = []
    for art in arts:  # refused here, before anything is rented, not at the job's end
        if not inside_job_folder(art):
            bad("artifacts", f"{art!r} is not a relative path inside the job's folder")
    ref_gpu = raw.get("ref_gpu")
    if ref_gpu is not None and (not isinstance(ref_gpu, str) or not ref_gpu.strip()):
        bad("ref_gpu", 'a GPU name, e.g. "RTX 4090"')
    ref_hours = number("ref_hours", 1, 10_000) if "ref_hours" in raw else None
    if (ref_gpu is None) != (ref_hours is None):
        missing = "ref_hours" if ref_hours is None else "ref_gpu"
        bad(missing, "ref_gpu and ref_hours size a job together")
    retries = field_of("retries", int, 1)
    if not 0 <= retries <= 1000:
        bad("retries", "must be between 0 and 1000")
    workdir = field_of("workdir", str, ".")
    timeout_s = number("timeout_min", 360, 100 * 24 * 60) * 60
    checkpoint_every_s = number("checkpoint_every_min", 10, 24 * 60) * 60
    if problems:
        raise ConfigErrors(f"jobs[{i}]", problems)
    return Job(
        name=jname,
        run=str(run),
        workdir=workdir,
        env=env,
        artifacts=tuple(arts),
        timeout_s=timeout_s,
        retries=retries,
        checkpoint=ckpt,
        checkpoint_every_s=checkpoint_every_s,
        secret_env=tuple(k for k in env if k in allowed),
        ref_gpu=ref_gpu.strip() if ref_gpu else None,
        ref_hours=ref_hours,
    )
