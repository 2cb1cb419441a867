"""Metrics: the exposition parses with prometheus-client's own parser and has every name
DESIGN.md fixes, the figures are the ones given, `--metrics` values are checked, the server and
the aiohttp handler serve it; the examples (Grafana dashboard, alert rules) name only metrics
that exist."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import generate_latest
from prometheus_client.aiohttp import make_aiohttp_handler
from prometheus_client.parser import text_string_to_metric_families
from rentwatch.core.errors import ConfigError
from rentwatch.notify.metrics import Metrics, parse_listen

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
# the names DESIGN.md fixes
METRIC_NAMES = (
    "rentwatch_instances",
    "rentwatch_spend_usd_total",
    "rentwatch_creates_total",
    "rentwatch_duds_total",
    "rentwatch_jobs",
    "rentwatch_budget_used_ratio",
    "rentwatch_poll_duration_seconds",
    "rentwatch_last_poll_timestamp_seconds",
    "rentwatch_notify_failures_total",
)


def filled() -> Metrics:
    m = Metrics()
    m.update(
        "qlora",
        phases={"verified": 2, "loading": 1},
        spend=12.345,
        creates=9,
        duds=5,
        jobs={"done": 3, "running": 2, "pending": 1},
        budget_ratio=0.617,
    )
    m.observe_poll(0.12, at=1764400000.0)
    m.observe_poll(3.0, at=1764400030.0)
    m.notify_failed()
    return m


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def exposed_names(m: Metrics) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(generate_latest(m.registry).decode()):
        names.add(family.name)
        names.update(s.name for s in family.samples)
    return names


def test_exposition_parses_and_has_every_design_name() -> None:
    m = filled()
    text = generate_latest(m.registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    sample_names = {s.name for f in families.values() for s in f.samples}
    for name in METRIC_NAMES:
        assert name in sample_names or name in families, name
        assert f"# TYPE {name} " in text, name  # the exact name, as written on the wire
    assert families["rentwatch_poll_duration_seconds"].type == "histogram"
    assert families["rentwatch_instances"].type == "gauge"
    assert families["rentwatch_jobs"].type == "gauge"


def test_figures_are_the_ones_given() -> None:
    got = samples(generate_latest(filled().registry).decode())
    c = (("campaign", "qlora"),)
    assert got[("rentwatch_spend_usd_total", c)] == pytest.approx(12.345)
    assert got[("rentwatch_creates_total", c)] == 9
    assert got[("rentwatch_duds_total", c)] == 5
    assert got[("rentwatch_budget_used_ratio", c)] == pytest.approx(0.617)
    assert got[("rentwatch_instances", (("campaign", "qlora"), ("phase", "verified")))] == 2
    assert got[("rentwatch_jobs", (("campaign", "qlora"), ("status", "running")))] == 2
    assert got[("rentwatch_last_poll_timestamp_seconds", ())] == 1764400030.0
    assert got[("rentwatch_poll_duration_seconds_count", ())] == 2
    assert got[("rentwatch_poll_duration_seconds_sum", ())] == pytest.approx(3.12)
    assert got[("rentwatch_notify_failures_total", ())] == 1


def test_a_phase_gone_reads_zero_and_campaigns_stay_apart() -> None:
    m = filled()
    m.update("qlora", {"verified": 3}, 13.0, 10, 5, {"done": 6}, None)
    m.update("other", {"loading": 1}, 0.5, 1, 0, {}, 0.05)
    got = samples(generate_latest(m.registry).decode())
    assert got[("rentwatch_instances", (("campaign", "qlora"), ("phase", "loading")))] == 0
    assert got[("rentwatch_instances", (("campaign", "qlora"), ("phase", "verified")))] == 3
    assert got[("rentwatch_jobs", (("campaign", "qlora"), ("status", "running")))] == 0
    assert ("rentwatch_budget_used_ratio", (("campaign", "qlora"),)) not in got  # no budget
    assert got[("rentwatch_spend_usd_total", (("campaign", "other"),))] == 0.5


def test_registries_are_separate_from_each_other_and_the_global_one() -> None:
    from prometheus_client import REGISTRY

    a, b = Metrics(), Metrics()  # a second would raise "Duplicated timeseries" if shared
    a.notify_failed()
    assert (
        samples(generate_latest(b.registry).decode())[("rentwatch_notify_failures_total", ())] == 0
    )
    assert REGISTRY.get_sample_value("rentwatch_notify_failures_total") is None


def test_serve_on_loopback() -> None:
    from rentwatch.run.metrics_server import MetricsServer

    m = filled()
    server = MetricsServer(m, "127.0.0.1", 0)
    try:
        assert server.host == "127.0.0.1" and server.port > 0
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            text = r.read().decode()
        assert ("rentwatch_creates_total", (("campaign", "qlora"),)) in samples(text)
    finally:
        server.close()


async def test_the_aiohttp_handler_serves_the_registry() -> None:
    app = web.Application()
    app.router.add_get("/metrics", make_aiohttp_handler(filled().registry))
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/metrics")
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        assert "rentwatch_spend_usd_total" in {n for n, _ in samples(await resp.text())}


@pytest.mark.parametrize(
    "value, expected",
    [
        ("127.0.0.1:9464", ("127.0.0.1", 9464)),
        ("9464", ("127.0.0.1", 9464)),
        (":9464", ("127.0.0.1", 9464)),
        ("0.0.0.0:9100", ("0.0.0.0", 9100)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9464", ("::1", 9464)),
        (" metrics.internal:80 ", ("metrics.internal", 80)),
    ],
)
def test_parse_listen(value: str, expected: tuple[str, int]) -> None:
    assert parse_listen(value) == expected


@pytest.mark.parametrize(
    "value, problem",
    [
        ("", "empty"),
        ("127.0.0.1:", "port must be a number"),
        ("127.0.0.1:65536", "port must be a number"),
        ("127.0.0.1:-1", "port must be a number"),
        ("host:http", "port must be a number"),
        ("::1:9464", "brackets"),
        ("[::1]", "brackets"),
        ("[nonsense]:80", "not an IPv6 address"),
        ("bad host:80", "not a host name"),
        ("-bad:80", "not a host name"),
    ],
)
def test_parse_listen_refuses(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_listen(value)


# the examples

_FUNCTIONS_OR_KEYWORDS = re.compile(
    r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)"
)
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_IDENT = re.compile(r"(?<![\w$.:])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(?!\s*\()")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "by", "without", "on"}


def metrics_named(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (labels, strings, ranges, functions and
    keywords taken out)."""
    e = _STRINGS.sub('""', expr)
    e = _MATCHERS.sub("", e)
    e = _RANGES.sub("", e)
    e = _FUNCTIONS_OR_KEYWORDS.sub("", e)
    return {m for m in _IDENT.findall(e) if m.lower() not in _KEYWORDS}


def test_metrics_named_reads_promql() -> None:
    assert metrics_named(
        'sum by (phase) (rate(rentwatch_spend_usd_total{campaign=~"$campaign"}[5m])) * 3600'
    ) == {"rentwatch_spend_usd_total"}
    assert metrics_named("time() - up > 3 and on (job) foo_bar") == {"up", "foo_bar"}


def dashboard_exprs() -> list[str]:
    dash = json.loads((EXAMPLES / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        if isinstance(var.get("query"), dict) and var["query"].get("query", "").startswith(
            "label_values("
        ):
            exprs.append(var["query"]["query"].removeprefix("label_values(").split(",")[0])
    return exprs


def alert_exprs() -> list[str]:
    text = (EXAMPLES / "prometheus-alerts.yml").read_text()
    try:
        import yaml
    except ImportError:
        exprs = re.findall(r"^\s*expr:\s*(.+?)\s*$", text, re.M)
        names = re.findall(r"^\s*-\s*alert:\s*(\S+)", text, re.M)
        assert exprs and len(exprs) == len(names)
        return exprs
    doc = yaml.safe_load(text)
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert all(r.get("alert") and r.get("expr") for r in rules)
    return [str(r["expr"]) for r in rules]


@pytest.mark.parametrize("source", [dashboard_exprs, alert_exprs], ids=["grafana", "alerts"])
def test_example_expressions_name_only_metrics_that_exist(source) -> None:
    exists = exposed_names(filled())
    exprs = source()
    assert len(exprs) >= 5
    used: set[str] = set()
    for expr in exprs:
        named = metrics_named(expr)
        assert named, f"names no metric: {expr}"
        assert named <= exists, f"{expr}: unknown {sorted(named - exists)}"
        used |= {n.removesuffix("_bucket") for n in named}
    # between them, the examples show every figure the controller serves
    if source is dashboard_exprs:
        assert used >= set(METRIC_NAMES)
