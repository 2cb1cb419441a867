"""Fuzzing the trust boundaries: whatever comes in ends in a typed error or a safe value."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rentwatch.core.campaign import parse_campaign
from rentwatch.core.errors import ConfigError, MalformedAnswer
from rentwatch.core.models import Instance, Offer
from rentwatch.core.offer_query import matches, parse_query
from rentwatch.core.text import clean
from rentwatch.core.verdict import detect_throttle, preflight_verdict
from rentwatch.job_runner import parse_status
from rentwatch.ledger import Ledger
from rentwatch.ledger.readonly import QueryFailed, QueryRefused
from rentwatch.probe_io import ProbeError, parse_probe_output

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=30),
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


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(api_rows)
def test_marketplace_json(row):
    for parse in (Instance.from_api, Offer.from_api):
        try:
            obj = parse(row)
        except MalformedAnswer:
            continue
        assert isinstance(obj.id, int)


@settings(max_examples=1000, deadline=None)
@given(st.binary(max_size=400) | st.text(max_size=300).map(str.encode))
def test_probe_output_and_job_logs(raw):
    try:
        doc = parse_probe_output(raw, "preflight")
    except ProbeError:
        doc = None
    if doc is not None:
        assert preflight_verdict(doc, "RTX 3090", 0.6).reason
    assert parse_status(raw).state in ("running", "exited", "vanished", "none")


@settings(max_examples=800, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(["probe", "schema", "ok", "matmul", "device", "error"]), json_values
    )
)
def test_preflight_documents(doc):
    v = preflight_verdict({"probe": "preflight", "schema": 1, **doc}, "RTX 4090", 0.6)
    assert v.ok in (True, False) and isinstance(v.reason, str)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["util", "sm_clock", "max_sm_clock", "reasons"]), json_values
        ),
        max_size=10,
    )
)
def test_throttle_samples(samples):
    assert detect_throttle(samples).throttled in (True, False)


@settings(max_examples=800, deadline=None)
@given(st.text(max_size=400))
def test_campaign_files_and_queries(text):
    try:
        parse_campaign(text)
    except ConfigError:
        pass
    try:
        q = parse_query(text)
    except ConfigError:
        return
    assert matches({"num_gpus": 1, "gpu_name": "RTX 3090"}, q) in (True, False)


@settings(max_examples=600, deadline=None)
@given(st.text(max_size=300))
def test_host_text_is_made_safe(text):
    out = clean(text, 120)
    assert len(out) <= 120
    assert not any(ord(c) < 32 or 0x7F <= ord(c) <= 0x9F for c in out)


@settings(
    max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
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
def test_sql_typed_into_the_ledger(tmp_path_factory, sql):
    path = tmp_path_factory.getbasetemp() / "fuzz.duckdb"
    led = Ledger(path)
    if not led.events(limit=1):
        led.record("note", at=1, actor="engine", reason="keep me")
    before = led.query("select count(*), max(seq) from events").rows
    try:
        led.query(sql, limit=50)
    except (QueryRefused, QueryFailed):
        pass
    assert led.query("select count(*), max(seq) from events").rows == before
    led.close()


def test_files_rentwatch_writes_are_private(tmp_path):
    from rentwatch.ssh_runner import load_or_create_key

    load_or_create_key(tmp_path / "id")
    Ledger(tmp_path / "l.duckdb").close()
    assert oct(os.stat(tmp_path / "id").st_mode & 0o777) == "0o600"
    assert oct(os.stat(tmp_path / "l.duckdb").st_mode & 0o777) == "0o600"
