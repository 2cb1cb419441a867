"""Campaign files (TOML): what to rent, how many, within what budget. See docs/campaigns.md."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError
from .offer_query import parse_query

SECRET_HINTS = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)", re.IGNORECASE)


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


@dataclass(frozen=True)
class Campaign:
    name: str
    image: str
    image_cuda: float
    disk_gb: float
    offer_query: dict[str, Any]
    max_dph: float
    fleet: int
    max_creates: int
    budget_usd: float
    deadline_min: float | None = None
    poll_s: float = 10.0  # market seconds between polls
    policy: dict[str, Any] = field(default_factory=dict)
    jobs: tuple[Job, ...] = ()


def _line_of(text: str, key: str) -> str:
    for i, line in enumerate(text.splitlines(), 1):
        if re.match(rf"\s*{re.escape(key)}\s*=", line):
            return f"line {i}: "
    return ""


def parse_campaign(text: str, source: str = "campaign") -> Campaign:
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
        if (
            isinstance(value, bool)
            and kind is not bool
            and bool not in (kind if isinstance(kind, tuple) else (kind,))
        ):
            raise fail(key, f"expected {getattr(kind, '__name__', kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise fail(key, f"expected {getattr(kind, '__name__', 'a number')}, got {value!r}")
        return value

    known = {
        "name",
        "image",
        "image_cuda",
        "disk_gb",
        "offer_query",
        "max_dph",
        "fleet",
        "max_creates",
        "budget_usd",
        "deadline_min",
        "poll_s",
        "policy",
        "jobs",
    }
    for key in data:
        if key not in known:
            raise fail(key, f"unknown key (known: {', '.join(sorted(known))})")
    name = get("name", str)
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise fail("name", "use letters, digits, '.', '_' or '-' (at most 64)")
    image = get("image", str)
    cuda_raw = get("image_cuda", (str, int, float), "0")
    try:
        image_cuda = float(cuda_raw)
    except ValueError:
        raise fail("image_cuda", f"not a version number: {cuda_raw!r}") from None
    disk = float(get("disk_gb", (int, float), 20))
    if not 1 <= disk <= 2000:
        raise fail("disk_gb", "must be between 1 and 2000")
    query_text = get("offer_query", (str, dict), "")
    try:
        query = parse_query(query_text) if isinstance(query_text, str) else dict(query_text)
    except ConfigError as exc:
        raise fail("offer_query", str(exc)) from None
    max_dph = float(get("max_dph", (int, float)))
    fleet = get("fleet", int, 1)
    max_creates = get("max_creates", int, 40)
    budget = float(get("budget_usd", (int, float)))
    if max_dph <= 0:
        raise fail("max_dph", "must be positive")
    if not 1 <= fleet <= 10_000:
        raise fail("fleet", "must be between 1 and 10000")
    if max_creates < fleet:
        raise fail("max_creates", f"must be at least the fleet size ({fleet})")
    if budget <= 0:
        raise fail("budget_usd", "must be positive")
    deadline = get("deadline_min", (int, float), None)
    poll = float(get("poll_s", (int, float), 10.0))
    if poll <= 0:
        raise fail("poll_s", "must be positive")
    policy = get("policy", dict, {})
    jobs_raw = get("jobs", list, [])
    jobs = []
    for i, raw in enumerate(jobs_raw):
        where = f"jobs[{i}]"
        if not isinstance(raw, dict):
            raise fail("jobs", f"{where} is not a table")
        jname, run = raw.get("name", f"job-{i + 1}"), raw.get("run")
        if not isinstance(run, str) or not run.strip():
            raise fail("run", f"{where}.run: a command is required")
        env = raw.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise fail("env", f"{where}.env: expected a table of strings")
        allowed = raw.get("allow_secret_env", [])
        if not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed):
            raise fail(
                "allow_secret_env", f"{where}.allow_secret_env: expected a list of env names"
            )
        secret = [k for k in env if SECRET_HINTS.search(k) and k not in allowed]
        if secret:
            raise fail(
                "env",
                f"{where}.env: {', '.join(secret)} looks like a secret; nothing secret "
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
            raise fail("checkpoint", f"{where}.checkpoint: a relative path inside the job's folder")
        arts = raw.get("artifacts", [])
        if not isinstance(arts, list) or not all(isinstance(a, str) for a in arts):
            raise fail("artifacts", f"{where}.artifacts: expected a list of paths")
        jobs.append(
            Job(
                name=str(jname),
                run=run,
                workdir=str(raw.get("workdir", ".")),
                env=env,
                artifacts=tuple(arts),
                timeout_s=float(raw.get("timeout_min", 360)) * 60,
                retries=int(raw.get("retries", 1)),
                checkpoint=ckpt,
                checkpoint_every_s=float(raw.get("checkpoint_every_min", 10)) * 60,
                secret_env=tuple(k for k in env if k in allowed),
            )
        )
    return Campaign(
        name=name,
        image=image,
        image_cuda=image_cuda,
        disk_gb=disk,
        offer_query=query,
        max_dph=max_dph,
        fleet=fleet,
        max_creates=max_creates,
        budget_usd=budget,
        deadline_min=float(deadline) if deadline is not None else None,
        poll_s=poll,
        policy=policy,
        jobs=tuple(jobs),
    )
