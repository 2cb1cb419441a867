"""Prometheus metrics of a controller, in a registry of their own, with the names `DESIGN.md` fixes.
The campaign's figures are the ledger's, exposed as they are by a custom collector, so `/metrics`
can never disagree with `rentwatch receipt`; counters are written with `_total`."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ..core.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
# a poll is one list call plus the rules: tens of ms on a small fleet, seconds at 10,000
_LABEL = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
_HOST_NAME = re.compile(rf"{_LABEL}(\.{_LABEL})*\.?", re.ASCII)
POLL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass
class _CampaignFigures:
    phases: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, int] = field(default_factory=dict)
    spend: float = 0.0
    creates: int = 0
    duds: int = 0
    budget_ratio: float | None = None


class Metrics(Collector):
    """The controller's metrics; thread-safe (the engine writes, the server's thread reads).
    The ledger's figures, per campaign, are those last given to `update`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._campaigns: dict[str, _CampaignFigures] = {}
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)
        self._poll = Histogram(
            "rentwatch_poll_duration_seconds",
            "Time one poll took (list call, rules, execution)",
            buckets=POLL_BUCKETS,
            registry=self.registry,
        )
        self._last_poll = Gauge(
            "rentwatch_last_poll_timestamp_seconds",
            "Unix time of the last successful poll",
            registry=self.registry,
        )
        self._notify_failures = Counter(
            "rentwatch_notify_failures",
            "Notifications given up (after retries), over every URL",
            registry=self.registry,
        )

    def update(
        self,
        campaign: str,
        phases: Mapping[str, int],
        spend: float,
        creates: int,
        duds: int,
        jobs: Mapping[str, int],
        budget_ratio: float | None,
    ) -> None:
        """The campaign's figures as the ledger has them now; `phases` and `jobs` are complete
        (a key seen before and absent now reads 0, not a vanished series)."""
        with self._lock:
            old = self._campaigns.get(campaign, _CampaignFigures())
            self._campaigns[campaign] = _CampaignFigures(
                phases={k: 0 for k in old.phases} | {str(k): int(v) for k, v in phases.items()},
                jobs={k: 0 for k in old.jobs} | {str(k): int(v) for k, v in jobs.items()},
                spend=float(spend),
                creates=int(creates),
                duds=int(duds),
                budget_ratio=None if budget_ratio is None else float(budget_ratio),
            )

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            campaigns = {name: fig for name, fig in sorted(self._campaigns.items())}
        instances = GaugeMetricFamily(
            "rentwatch_instances",
            "Instances held, by lifecycle phase",
            labels=["campaign", "phase"],
        )
        jobs = GaugeMetricFamily(
            "rentwatch_jobs", "Jobs of the campaign, by status", labels=["campaign", "status"]
        )
        spend = CounterMetricFamily(
            "rentwatch_spend_usd", "USD spent in all (the ledger's figure)", labels=["campaign"]
        )
        creates = CounterMetricFamily("rentwatch_creates", "Instances created", labels=["campaign"])
        duds = CounterMetricFamily(
            "rentwatch_duds",
            "Rentals that never delivered through their host's fault (outbids and "
            "cancellations are no duds)",
            labels=["campaign"],
        )
        budget = GaugeMetricFamily(
            "rentwatch_budget_used_ratio",
            "Spend over the campaign's budget (1 = all of it)",
            labels=["campaign"],
        )
        for name, fig in campaigns.items():
            for phase, n in sorted(fig.phases.items()):
                instances.add_metric([name, phase], n)
            for status, n in sorted(fig.jobs.items()):
                jobs.add_metric([name, status], n)
            spend.add_metric([name], fig.spend)
            creates.add_metric([name], fig.creates)
            duds.add_metric([name], fig.duds)
            if fig.budget_ratio is not None:
                budget.add_metric([name], fig.budget_ratio)
        yield from (instances, spend, creates, duds, jobs, budget)

    def observe_poll(self, seconds: float, at: float) -> None:
        """One successful poll: how long it took, and when it ended (Unix time)."""
        self._poll.observe(max(0.0, seconds))
        self._last_poll.set(at)

    def notify_failed(self) -> None:
        self._notify_failures.inc()


def parse_listen(value: str, flag: str = "--metrics") -> tuple[str, int]:
    """`HOST:PORT` (or `PORT`, or `:PORT`: on `DEFAULT_HOST`) as (host, port); IPv6 as `[::1]:9464`;
    port 0: any free port. ConfigError, naming `flag`, saying what is wrong otherwise."""
    text = value.strip()
    if not text:
        raise ConfigError(f"{flag}: empty; give HOST:PORT, for example 127.0.0.1:9464")
    if text.startswith("["):
        host, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ConfigError(f"{flag} {value!r}: IPv6 needs brackets and a port: [::1]:9464")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{flag} {value!r}: {host!r} is not an IPv6 address") from None
    elif text.count(":") > 1:
        raise ConfigError(f"{flag} {value!r}: write an IPv6 address in brackets: [::1]:9464")
    elif ":" in text:
        host, _, port_text = text.partition(":")
        host = host or DEFAULT_HOST
    else:
        host, port_text = DEFAULT_HOST, text
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ConfigError(f"{flag} {value!r}: port must be a number from 0 to 65535")
    if not host.startswith("[") and not _is_host(host):
        raise ConfigError(f"{flag} {value!r}: {host!r} is not a host name or address")
    return host, int(port_text)


def _is_host(host: str) -> bool:
    """An IP address, or a host name of RFC 1123 labels (letters, digits, inner hyphens)."""
    with contextlib.suppress(ValueError):
        return bool(ipaddress.ip_address(host))
    return len(host) <= 253 and _HOST_NAME.fullmatch(host) is not None
