"""The offer query language is the official CLI's: its own parser (vastai `api/query.py`) and
rentwatch's read the same queries into the same filters, and the simulator's matcher applies
them as the server does (units, aliases, driver versions, wildcards, negations)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.query import parse_query
from rentwatch.sim.query_match import matches

QUERIES = [
    "num_gpus=1 rentable=true",
    "gpu_ram>=24 cpu_ram>32 duration>=3",
    "cuda_vers>=12.4 dph<0.5",
    "driver_version>=550.54.14",
    "gpu_name in [RTX_3090,RTX_4090] num_gpus>=1",
    "gpu_name nin [RTX_3060,RTX_3070]",
    "verified=any rentable=true",
    "reliability>0.98 geolocation notin [CN,VN]",
    "num_gpus noteq 2",
    "num_gpus not eq 2",
    "gpu_name=RTX_4090 inet_down>=500",
    "dph_total<=0.4 dlperf_usd>10",
    "gpu_total_ram>=48 external=false",
    "gpu_name not in [RTX_3060]",
    "num_gpus>=1 num_gpus<=4",
]


def _cli_python() -> str | None:
    """The interpreter the official CLI is installed for (its entry point's shebang)."""
    exe = shutil.which("vastai") or os.path.join(os.path.dirname(sys.executable), "vastai")
    if not os.path.exists(exe):
        return None
    with open(exe) as f:
        first = f.readline().strip()
    return first[2:].strip() if first.startswith("#!") else None


CLI_PARSE = """
import json, sys
from vastai.api.query import parse_query, offers_fields, offers_alias, offers_mult
out = []
for q in json.loads(sys.stdin.read()):
    out.append(parse_query(q, {}, offers_fields, offers_alias, offers_mult))
print(json.dumps(out))
"""


def _official(queries: list[str]) -> list[dict[str, Any]]:
    py = _cli_python()
    if py is None:
        pytest.skip("the official vastai CLI is not installed")
    r = subprocess.run(
        [py, "-c", CLI_PARSE],
        input=json.dumps(queries),
        capture_output=True,
        text=True,
        timeout=60,
    )
    if r.returncode != 0 and "No module named 'vastai" in r.stderr:
        pytest.skip("the official vastai package is not importable")
    assert r.returncode == 0, r.stderr
    return list(json.loads(r.stdout))


def _same(value: Any) -> Any:
    """What the server makes of a value: the CLI sends numbers as text, rentwatch as numbers."""
    if isinstance(value, list):
        return [_same(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _normal(query: dict[str, Any]) -> dict[str, Any]:
    return {f: {op: _same(v) for op, v in cond.items()} for f, cond in query.items()}


def test_rentwatch_sends_what_the_official_cli_sends():
    official = _official(QUERIES)
    for text, theirs in zip(QUERIES, official, strict=True):
        ours = parse_query(text)
        assert _normal(ours) == _normal(theirs), text


def test_units_aliases_versions_and_wildcards():
    q = parse_query("gpu_ram>=24 cuda_vers>=12.4 dph<0.5 driver_version>=550.54.14 verified=any")
    assert q == {
        "gpu_ram": {"gte": 24000.0},
        "cuda_max_good": {"gte": 12.4},
        "dph_total": {"lt": 0.5},
        "driver_version": {"gte": 550054014},
    }
    assert parse_query("duration>=2")["duration"] == {"gte": 2 * 86400.0}
    assert parse_query("num_gpus nin [2,4]") == {"num_gpus": {"notin": [2, 4]}}
    with pytest.raises(ConfigError):
        parse_query("verified>any")
    with pytest.raises(ConfigError):
        parse_query("num_gpus >>> 3")


def test_matcher_reads_queries_as_the_server_does():
    offer = {
        "gpu_name": "RTX 3090",
        "gpu_ram": 24576,
        "cpu_ram": 32000,
        "duration": 5 * 86400.0,
        "driver_version": "550.54.14",
        "num_gpus": 1,
    }
    assert matches(offer, parse_query("gpu_ram>=24 cpu_ram>=32 duration>=3"))
    assert not matches(offer, parse_query("gpu_ram>=48"))  # 24 GB: not 48 000 MB
    assert matches(offer, parse_query("driver_version>=535.183.01"))
    assert not matches(offer, parse_query("driver_version>=560.35.03"))
    assert matches(offer, parse_query("gpu_name nin [RTX_4090]"))
    assert not matches(offer, parse_query("gpu_name notin [RTX_3090]"))
    assert matches(offer, parse_query("num_gpus noteq 2"))
    assert matches(offer, parse_query("gpu_name=any"))


def test_simulator_search_applies_cli_units(make_sim):
    sim = make_sim(offers=40, seed=11)

    async def run() -> tuple[list[float], int, int]:
        async with VastClient(sim.url, "test-key", min_intervals={}) as c:
            big = await c.search_offers(parse_query("gpu_ram>=24"))
            every = await c.search_offers({})
            newer = await c.search_offers(parse_query("driver_version>=560.35.03"))
            return [o.gpu_ram_mb or 0 for o in big], len(every), len(newer)

    big, every, newer = asyncio.run(run())
    assert big and all(mb >= 24000 for mb in big)
    assert len(big) < every  # the 8-12 GB cards are left out, not matched against "24"
    versions = {m.driver_version for m in sim.market.machines}
    assert 0 < newer < every or versions <= {"560.35.03", "570.124.04"}
