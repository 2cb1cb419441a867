"""Fuzzing the trust boundaries: whatever comes in ends in a typed error or a safe value."""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rentwatch.core.errors import ConfigError, MalformedAnswer
from rentwatch.core.policy import get_policy
from rentwatch.core.preflight.verdict import detect_throttle, preflight_verdict
from rentwatch.core.text import clean
from rentwatch.engine.hosts.probe_io import ProbeError, parse_probe_output
from rentwatch.engine.jobs.runner import parse_status
from rentwatch.ledger import Ledger
from rentwatch.ledger.readonly import QueryFailed, QueryRefused
from rentwatch.market.factory import load_campaign
from rentwatch.market.vast.query import parse_query
from rentwatch.market.vast.rows import parse_instance, parse_offer
from rentwatch.sim.query_match import matches

from tests.fuzzing import examples
from tests.shown_text import is_clean

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "id",
    "machine_id",
    "host_id",
    "gpu_name",
    "dph_total",
    "dph_base",
    "storage_cost",
    "actual_status",
    "status_msg",
    "start_date",
    "ssh_port",
    "ports",
    "gpu_util",
    "cuda_max_good",
    "reliability2",
    "label",
]
api_rows = st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=len(FIELDS)) | json_values


@settings(max_examples=examples(3000), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api_rows)
def test_marketplace_json(row):
    for parse in (parse_instance, parse_offer):
        try:
            obj = parse(row)
        except MalformedAnswer:
            continue
        assert isinstance(obj.id, int)


@settings(max_examples=examples(3000), deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=300).map(str.encode))
def test_probe_output_and_job_logs(raw):
    try:
        doc = parse_probe_output(raw, "preflight")
    except ProbeError:
        doc = None
    if doc is not None:
        assert preflight_verdict(doc, "RTX 3090", 0.6).reason
    assert parse_status(raw).state in ("running", "exited", "vanished", "none")


@settings(max_examples=examples(3000), deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["probe", "schema", "ok", "matmul", "device", "error"]), json_values
    )
)
def test_preflight_documents(doc):
    v = preflight_verdict({"probe": "preflight", "schema": 1, **doc}, "RTX 4090", 0.6)
    assert v.ok in (True, False) and isinstance(v.reason, str)


@settings(max_examples=examples(3000), deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["util", "sm_clock", "max_sm_clock", "reasons"]),
            json_scalars | st.lists(json_scalars, max_size=3),
        ),
        max_size=10,
    )
)
def test_throttle_samples(samples):
    assert detect_throttle(samples).throttled in (True, False)


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value != value:
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"


toml_scalars = (
    st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["12.4", "../x", "ckpt", "/etc", "a b", "API_KEY", "price"])
)
toml_values = toml_scalars | st.lists(toml_scalars, max_size=3)
CAMPAIGN_KEYS = [
    "name", "image", "image_cuda", "disk_gb", "offer_query", "max_dph", "fleet", "max_creates",
    "budget_usd", "deadline_min", "poll_s", "bogus",
]  # fmt: skip
JOB_KEYS = [
    "name", "run", "workdir", "env", "allow_secret_env", "artifacts", "timeout_min", "retries",
    "checkpoint", "checkpoint_every_min", "bogus",
]  # fmt: skip
POLICY_KEYS = ["freeze_window_s", "use_patterns", "spare_attempts", "rank", "fatal_patterns"]
VALID = {
    "name": "c",
    "image": "img",
    "max_dph": 0.5,
    "budget_usd": 5,
    "fleet": 2,
    "max_creates": 10,
}


@st.composite
def campaign_files(draw) -> str:
    """Campaign files that parse as TOML and are mostly right, each with a few wrong values."""
    top = dict(VALID)
    top.update(draw(st.dictionaries(st.sampled_from(CAMPAIGN_KEYS), toml_values, max_size=3)))
    lines = [f"{k} = {_toml(v)}" for k, v in top.items()]
    policy = draw(st.dictionaries(st.sampled_from(POLICY_KEYS), toml_values, max_size=2))
    if policy:
        lines += ["[policy]"] + [f"{k} = {_toml(v)}" for k, v in policy.items()]
    for _ in range(draw(st.integers(0, 3))):
        job = {"name": draw(st.sampled_from(["a", "b", "c"])), "run": "python x.py"}
        job.update(draw(st.dictionaries(st.sampled_from(JOB_KEYS), toml_values, max_size=3)))
        lines += ["[[jobs]]"] + [f"{k} = {_toml(v)}" for k, v in job.items()]
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(3000), deadline=None)
@given(campaign_files())
def test_campaign_files_with_wrong_values(text):
    """A wrong value ends in a ConfigError naming its field; what parses is safe to run."""
    try:
        camp = load_campaign(text)
        policy = get_policy("default").with_overrides(camp.policy)
    except ConfigError as exc:
        assert str(exc).startswith(("campaign: ", "policy")), exc
        return
    numbers = [camp.max_dph, camp.budget_usd, camp.poll_s, camp.disk_gb]
    numbers += [x for j in camp.jobs for x in (j.timeout_s, j.checkpoint_every_s)]
    assert all(math.isfinite(x) and x > 0 for x in numbers)
    assert 1 <= camp.fleet <= camp.max_creates
    assert len({j.name for j in camp.jobs}) == len(camp.jobs)
    assert all("/" not in j.name and j.name not in (".", "..") for j in camp.jobs)
    assert all(j.retries >= 0 for j in camp.jobs)
    assert policy.rank in ("price", "expected_cost")


@settings(max_examples=examples(2000), deadline=None)
@given(st.text(max_size=400))
def test_campaign_files_and_queries(text):
    try:
        load_campaign(text)
    except ConfigError:
        pass
    try:
        q = parse_query(text)
    except ConfigError:
        return
    assert matches({"num_gpus": 1, "gpu_name": "RTX 3090"}, q) in (True, False)


@settings(max_examples=examples(3000), deadline=None)
@given(st.text(max_size=300))
def test_host_text_is_made_safe(text):
    out = clean(text, 120)
    assert len(out) <= 120
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out)
    assert is_clean(out)  # no bidi overrides, isolates or invisible marks either
    assert clean(out, 120) == out  # cleaning is idempotent: every path may clean again


_ESCAPE_PARTS = [
    "\x1b",
    "\x1b[",
    "\x1b]",
    "\x9b",
    "\x9d",
    "\x07",
    "\x1b\\",
    "\u202e",
    "52;c;",
    "2J",
]


@settings(max_examples=examples(2000), deadline=None)
@given(st.lists(st.sampled_from(_ESCAPE_PARTS) | st.text(max_size=4), max_size=20))
def test_escape_soup_is_made_safe(parts):
    out = clean("".join(parts), 400)
    assert is_clean(out) and "\x1b" not in out


@pytest.fixture(scope="module")
def fuzz_ledger(tmp_path_factory):
    led = Ledger(tmp_path_factory.mktemp("fuzz") / "fuzz.duckdb")
    led.record("note", at=1, actor="engine", reason="keep me")
    yield led
    led.close()


@settings(max_examples=examples(2000), deadline=None)
@given(
    st.text(max_size=120)
    | st.sampled_from(
        [
            "select 1",
            "DELETE FROM events",
            "select * from events;drop",
            "pragma version",
            "'; delete from events; --",
        ]
    )
)
def test_sql_typed_into_the_ledger(fuzz_ledger, sql):
    check = "select count(*), max(seq), sum(hash(reason)) from events"
    before = fuzz_ledger.query(check).rows
    try:
        fuzz_ledger.query(sql, limit=50)
    except (QueryRefused, QueryFailed):
        pass
    assert fuzz_ledger.query(check).rows == before


def test_files_rentwatch_writes_are_private(tmp_path):
    from rentwatch.engine.hosts.ssh import load_or_create_key

    load_or_create_key(tmp_path / "id")
    Ledger(tmp_path / "l.duckdb").close()
    assert oct(os.stat(tmp_path / "id").st_mode & 0o777) == "0o600"
    assert oct(os.stat(tmp_path / "l.duckdb").st_mode & 0o777) == "0o600"


# -- the query sandbox: SQL assembled from the pieces attacks are made of --------------------
_SQL_HEADS = [
    "",
    "EXPLAIN ",
    "EXPLAIN ANALYZE ",
    "explain analyse ",
    "EXPLAIN (ANALYZE) ",
    "EXPLAIN (FORMAT json) ",
    "/* x */ EXPLAIN /* y */ ANALYZE ",
    "WITH x AS (SELECT 1) ",
    "-- c\n",
]
_SQL_BODIES = [
    "SELECT * FROM events",
    "DELETE FROM events",
    "UPDATE events SET reason = 'x'",
    "INSERT INTO events (seq) VALUES (1)",
    "DROP VIEW receipt",
    "DROP TABLE events",
    "CREATE TABLE t AS SELECT 1",
    "CREATE OR REPLACE VIEW receipt AS SELECT 1",
    "ALTER TABLE events ADD COLUMN z INT",
    "TRUNCATE events",
    "COPY events TO '{d}/out.csv'",
    "COPY (SELECT 1) TO 'rel-out.csv'",
    "EXPORT DATABASE '{d}/exp'",
    "ATTACH '{d}/other.duckdb' AS o",
    "CHECKPOINT",
    "VACUUM",
    "SET enable_external_access = true",
    "RESET ALL",
    "INSTALL httpfs",
    "LOAD sqlite",
    "PRAGMA database_list",
    "CALL pragma_version()",
    "SELECT * FROM read_text('{d}/secret.txt')",
    "SELECT * FROM read_blob('/proc/self/environ')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM glob('{d}/*')",
    "SELECT * FROM 'http://127.0.0.1:9/x.parquet'",
    "SELECT * FROM sqlite_scan('{d}/x.db', 't')",
    "SELECT * FROM query('DELETE FROM events')",
    "SELECT * FROM duckdb_secrets()",
    "VALUES (1)",
    "FROM events LIMIT 3",
]
_SQL_TAILS = ["", ";", "; DELETE FROM events", " -- x", "; SELECT 1", " LIMIT 1"]

sql_pieces = st.tuples(
    st.sampled_from(_SQL_HEADS),
    st.sampled_from(_SQL_BODIES),
    st.sampled_from(_SQL_TAILS),
    st.text(max_size=8),
)


@pytest.fixture(scope="module")
def sandbox_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("sandbox")
    (d / "secret.txt").write_text("vast-key-fuzz-secret")
    led = Ledger(d / "l.duckdb")
    for i in range(5):
        led.record("note", at=i, actor="engine", reason=f"keep {i}")
    led.close()
    return d


def _snapshot(d) -> tuple[str, list[str], list[str]]:
    import hashlib

    digest = hashlib.sha256((d / "l.duckdb").read_bytes()).hexdigest()
    return digest, sorted(os.listdir(d)), sorted(os.listdir("."))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sql_pieces)
def test_sql_through_the_sandbox_changes_nothing(sandbox_dir, pieces):
    """Random SQL, typed into `rentwatch ledger`'s path (the file opened read-only) and into a
    controller's ledger (open for writing): the file's hash is unchanged, no file appears,
    nothing secret comes back."""
    head, body, tail, noise = pieces
    sql = (head + body.replace("{d}", str(sandbox_dir)) + tail + noise).strip()
    before = _snapshot(sandbox_dir)
    with Ledger(sandbox_dir / "l.duckdb", read_only=True) as led:
        try:
            res = led.query(sql, limit=20)
        except (QueryRefused, QueryFailed) as exc:
            assert "vast-key-fuzz-secret" not in str(exc)
        else:
            assert "vast-key-fuzz-secret" not in repr(res.rows)
            assert not any("ANALY" in tok.upper() for tok in head.split())
    assert _snapshot(sandbox_dir) == before
    # the controller's side: writable by the engine, not by the query
    led = Ledger(sandbox_dir / "l.duckdb")
    check = "select count(*), max(seq), sum(hash(reason)) from events"
    rows = led.query(check).rows
    try:
        led.query(sql, limit=20)
    except (QueryRefused, QueryFailed):
        pass
    assert led.query(check).rows == rows
    assert led.query("select count(*) from duckdb_views() where not internal").rows[0][0] > 0
    led.close()
    assert sorted(os.listdir(sandbox_dir)) == before[1] and sorted(os.listdir(".")) == before[2]
