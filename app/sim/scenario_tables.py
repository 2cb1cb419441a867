"""The smaller tables of a scenario, as frozen values with their defaults: `[faults]`, `[ssh]`,
`[listing]`, `[churn]`, `[hosts]` and `[states]` (the format: docs/scenarios.md)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from ..core.errors import ConfigError


@dataclass(frozen=True)
class Faults:
    rate_429: float = 0.0
    rate_5xx: float = 0.0
    rate_timeout: float = 0.0
    rate_malformed: float = 0.0
    ssh_drop: float = 0.0
    rate_redirect: float = 0.0  # answered with a 307 to the same call (it must keep its key)
    timeout_s: float = 15.0  # how long a "slow" answer stalls (wall seconds)


@dataclass(frozen=True)
class SSHConfig:
    """`[ssh]`: like Vast, every running instance has a proxy route and a share of hosts a direct
    one; the proxy drops a share of sessions."""

    direct_share: float = 0.5
    proxy_drop: float = 0.0
    # share of instances whose SSH sessions carry CONTAINER_ID and CONTAINER_API_KEY. None: as
    # Vast does it, by image: only Vast's own images (`vastai/...`) export them to SSH sessions;
    # on any other the container's variables reach a session only through the onstart recipe
    # `env >> /etc/environment` (vast-ai/docs guides/instances/docker-environment.mdx)
    container_env: float | None = None
    # share of instances where a session can read PID 1's environment (/proc/1/environ: the
    # watchdog's fallback; a host may run sessions as a user that cannot)
    proc_environ: float = 1.0


@dataclass(frozen=True)
class Listing:
    """`[listing]`: what the search shows besides the scenario's verified `offers`: unverified,
    deverified and external shares on top (the official CLI filters them out by default), and the
    share of creates that find the offer just taken."""

    unverified: float = 0.2
    external: float = 0.1
    taken: float = 0.0
    deverified: float = 0.0


@dataclass(frozen=True)
class Churn:
    """`[churn]`: each machine listed a share of the time (`presence`, log-uniform in [low, high])
    window by window; with `relist_new_id` a listing carries one of three offer ids. The default
    is always listed, one id."""

    presence: tuple[float, float] = (1.0, 1.0)
    window_min: float = 30.0
    relist_new_id: bool = False


@dataclass(frozen=True)
class Hosts:
    """`[hosts]`: what the offers say of a host: the share on a fast line, how far `reliability2`
    predicts delivery (0 to 1), the storage price's spread, and the share of multi-GPU machines.
    None keeps the flat draws."""

    inet_fast_share: float | None = None
    reliability_signal: float | None = None
    storage_spread: str = "uniform"
    multi_gpu_share: float = 0.0


@dataclass(frozen=True)
class States:
    """`[states]`: how unkind the boot is: `scheduling`, a state no list names, build output in the
    status line, and the market's own stops at a contract's end."""

    scheduling_share: float = 0.3
    unnamed_share: float = 0.1  # rentwatch leaves unknown states to its deadlines
    unnamed_name: str = "provisioning"
    build_output_share: float = 0.5
    contract_end_share: float = 0.0
    contract_end_min: tuple[float, float] = (20.0, 240.0)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def parse_churn(raw: Any) -> Churn:
    """`[churn]`, checked."""
    if not isinstance(raw, dict):
        raise ConfigError("churn: expected a table")
    kw: dict[str, Any] = {}
    for key, v in raw.items():
        if key == "presence":
            if not (isinstance(v, list) and len(v) == 2 and all(_number(x) for x in v)):
                v = None
            if v is None or not 0 < v[0] <= v[1] <= 1:
                raise ConfigError("churn.presence: expected [low, high] with 0 < low <= high <= 1")
            kw[key] = (float(v[0]), float(v[1]))
        elif key == "window_min":
            if not _number(v) or v < 1:
                raise ConfigError(f"churn.window_min: expected minutes >= 1, got {v!r}")
            kw[key] = float(v)
        elif key == "relist_new_id":
            if not isinstance(v, bool):
                raise ConfigError(f"churn.relist_new_id: expected true or false, got {v!r}")
            kw[key] = v
        else:
            known = ", ".join(f.name for f in fields(Churn))
            raise ConfigError(f"churn: unknown key {key!r} (known: {known})")
    return Churn(**kw)


def parse_hosts(raw: Any, storage: tuple[float, float]) -> Hosts:
    """`[hosts]`, checked (a log spread needs the scenario's `storage_cost` above 0)."""
    if not isinstance(raw, dict):
        raise ConfigError("hosts: expected a table")
    kw: dict[str, Any] = {}
    for key, v in raw.items():
        if key == "storage_spread":
            if v not in ("uniform", "log"):
                raise ConfigError(f'hosts.storage_spread: expected "uniform" or "log", got {v!r}')
            if v == "log" and storage[0] <= 0:
                raise ConfigError("hosts.storage_spread: a log spread needs storage_cost above 0")
        elif key in ("inet_fast_share", "reliability_signal", "multi_gpu_share"):
            if not _number(v) or not 0 <= v <= 1:
                raise ConfigError(f"hosts.{key}: expected a share between 0 and 1, got {v!r}")
            v = float(v)
        else:
            known = ", ".join(f.name for f in fields(Hosts))
            raise ConfigError(f"hosts: unknown key {key!r} (known: {known})")
        kw[key] = v
    return Hosts(**kw)
