"""Policy presets: the same campaign refereed under each. All times are market seconds."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from .blame.patterns import DEFAULT_FATAL_PATTERNS
from .errors import ConfigError, ConfigErrors
from .offers.track_record import HALF_LIFE_H
from .preflight.verdict import CheckPolicy


@dataclass(frozen=True)
class Policy:
    name: str
    # boot watcher
    freeze_window_s: float | None = 360.0  # status line unchanged this long: abandon (None: off)
    download_freeze_s: float | None = None  # a tighter window while layers download
    extract_freeze_s: float | None = None  # a wider window in silent phases (extracting, verifying)
    fatal_patterns: tuple[str, ...] = DEFAULT_FATAL_PATTERNS
    use_patterns: bool = True
    terminal_status_abandon: bool = True  # exited / unknown / offline while booting
    boot_deadline_s: float = 45 * 60.0  # created -> running, at most
    # verification
    preflight: bool = True
    trust_running: bool = False  # count a running instance as verified (nvidia-smi trust)
    preflight_after_s: float = 0.0  # start the check this long after running (naive: later)
    ssh_deadline_s: float = 300.0  # running -> SSH answering, at most
    # and at least this many SSH tries ended without an answer (every try since running did:
    # one that answers ends the preflight). 0: the deadline alone, even with a try in flight
    ssh_tries: int = 0
    # wall seconds the SSH deadline never falls under, whatever the market's time scale: real
    # network and CPU latency does not speed up with a simulator's clock (0: none). At most
    # this: the engine lowers it to what its connects measure (host_link.HostLink.io_floor)
    io_floor_wall_s: float = 0.0
    preflight_timeout_s: float = 90.0  # wall seconds for the probe itself
    # running -> a preflight verdict, at most, whatever the SSH state (a try in flight, a
    # route never published, a task gone): past it the attempt is given up as `timeout`.
    # Never under the SSH deadline, and never under PREFLIGHT_IO_FLOORS I/O floors beyond it
    preflight_deadline_s: float = 30 * 60.0
    min_speed_share: float = 0.6
    check_gpu_name: bool = True
    # quarantine and replacement
    quarantine: bool = True
    quarantine_persistent: bool = False  # False: within the campaign only (the article's)
    quarantine_hours: float | None = None  # persistent quarantine expiry; None: for ever
    spare_attempts: int = 0  # extra creates in flight beyond the fleet's shortfall, always
    # hedged provisioning (core/hedge.py): more spares while they pay for the time they save
    value_of_time_usd_per_h: float = 0.0  # the operator's price of an hour's wait; 0: no hedging
    max_spare_attempts: int = 0  # hedging never keeps more than this many spares in flight
    reuse_stopped: bool = False  # start a stopped, proven rental again before creating
    offer_sanity: bool = False  # skip offers whose own benchmark contradicts the GPU they claim
    rank: str = "price"  # price | expected_cost
    # how many runs' worth the market's pooled record counts for beside a GPU model's own
    # record, and a flat prior beside the pool, when ranking by delivered work
    odds_prior_runs: float = 2.0
    # market hours for a rental's evidence to weigh half in the record (core/offers/track_record.py;
    # 0: it never fades)
    memory_half_life_h: float = HALF_LIFE_H
    # stop rules for verified instances
    idle_util_pct: float = 10.0
    idle_grace_s: float = 15 * 60.0
    # once no job is queued, stop a proven host that has had no job this long (None: only the
    # idle rule, on the GPU's own utilisation, stops it)
    drained_grace_s: float | None = None
    stop_on_throttle: bool = False
    # a verified host whose sessions get no answer this long is stopped (never destroyed) and
    # its job requeued: its own watchdog may be dead or the host partitioned (None: off)
    silent_stop_s: float | None = 10 * 60.0
    throttle_ratio: float = 0.85
    # the deeper host checks (PCIe, VRAM, disk, download, XID) and their thresholds
    checks: CheckPolicy = CheckPolicy()

    def with_overrides(self, overrides: dict[str, Any]) -> Policy:
        clean: dict[str, Any] = {}
        problems: list[str] = []  # every bad setting at once, not only the first
        for key, value in overrides.items():
            try:
                clean[key] = self._setting(key, value)
            except ConfigError as exc:
                problems.append(str(exc))
        if problems:
            raise ConfigErrors("policy", problems)
        return replace(self, **clean)

    def _setting(self, key: str, value: Any) -> Any:
        """`value` as the setting `key` takes it, else ConfigError."""
        fields = self.__dataclass_fields__
        if key in REMOVED:
            raise ConfigError(f"policy: {key!r} was removed ({REMOVED[key]}): delete it")
        if key not in fields or key == "name":
            raise ConfigError(f"policy: unknown setting {key!r}")
        if key == "fatal_patterns":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError("policy.fatal_patterns: expected a list of strings")
            return tuple(value)
        if key == "checks":
            return _checks(self.checks, value)
        if value is False and "None" in str(fields[key].type):
            return None  # TOML has no null: `false` switches an optional window off
        _check_setting(key, str(fields[key].type), value)
        return value


RANKS = ("price", "expected_cost")
# settings no policy turned on, taken out after the benchmarks (docs/benchmarks.md) rejected them
REMOVED = {
    "max_extra_hosts": "the fleet is the most hosts ever held",
    "fleet_by_worth": "the fleet is held whatever the work's size",
    "wide_search": "the offer search is Vast's default, verified and not external",
    "proven_bid_share": "a proven machine bids as any other",
}


def _checks(base: CheckPolicy, value: Any) -> CheckPolicy:
    """A campaign's `[policy.checks]` table over the policy's own check settings, each
    setting checked like any other (a flag where a flag goes, a finite number not negative)."""
    if not isinstance(value, dict):
        raise ConfigError("policy.checks: expected a table of check settings")
    fields = base.__dataclass_fields__
    for key, setting in value.items():
        if key not in fields:
            raise ConfigError(f"policy.checks: unknown setting {key!r}")
        _check_setting(f"checks.{key}", str(fields[key].type), setting)
    return replace(base, **value)


def _check_setting(key: str, kind: str, value: Any) -> None:
    """A campaign's policy override has the setting's type: a number where a number goes
    (finite, not negative), a flag where a flag goes, a known ranking."""
    where = f"policy.{key}"
    if kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
    elif kind.startswith(("float", "int")):
        number = (int,) if kind.startswith("int") else (int, float)
        if isinstance(value, bool) or not isinstance(value, number):
            raise ConfigError(f"{where}: expected a {kind.split()[0]}, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}: must be a finite number, not negative, got {value!r}")
    elif key == "rank":
        if value not in RANKS:
            raise ConfigError(f"{where}: one of {', '.join(RANKS)}, got {value!r}")
    else:
        raise ConfigError(f"{where}: cannot be set from a campaign")


NAIVE = Policy(
    name="naive",
    freeze_window_s=None,
    use_patterns=False,
    terminal_status_abandon=False,
    boot_deadline_s=30 * 60.0,
    trust_running=True,
    preflight_after_s=105 * 60.0,
    ssh_deadline_s=105 * 60.0,
    check_gpu_name=False,
    quarantine=False,
)
SEED = Policy(name="seed")  # the field defaults: the article's rules
DEFAULT = Policy(
    name="default",
    download_freeze_s=90.0,
    extract_freeze_s=900.0,
    ssh_deadline_s=150.0,
    ssh_tries=1,
    io_floor_wall_s=1.0,
    quarantine_persistent=True,
    quarantine_hours=24 * 7,
    value_of_time_usd_per_h=0.7,
    max_spare_attempts=3,
    reuse_stopped=True,
    drained_grace_s=60.0,
    offer_sanity=True,
    rank="expected_cost",
    odds_prior_runs=8.0,
)
POLICIES = {p.name: p for p in (NAIVE, SEED, DEFAULT)}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ConfigError(f"unknown policy {name!r} (choose {', '.join(POLICIES)})") from None
