"""The client's side of hosts' price increases (vast-cli PR #401): the pending rows read into
rentwatch's words (per-second, per-GPU prices to $/h), a row that cannot be read costs that row
only, hostile strings never pass as prices, and an answer to a row no longer pending is told
apart from a refusal."""

from __future__ import annotations

import json

import httpx
import pytest
from rentwatch.core.errors import MalformedAnswer
from rentwatch.market.errors import ApiError
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.price_increases import read_pending, read_row

ROW = {
    "pending_price_increase_id": 41,
    "contract_id": 1234,
    "host_id": 9,
    "new_gpu_costpersec": 0.5 / 3600,
    "new_disk_ram_costpersec": None,
    "new_bwu_cost": None,
    "new_bwd_cost": 0.01,
    "new_platform_fee": None,
    "old_gpu_costpersec": 0.4 / 3600,
    "old_disk_ram_costpersec": 0.2 / 3600 / 720,
    "old_bwu_cost": None,
    "old_bwd_cost": 0.005,
    "old_platform_fee": None,
    "contract_end_date": 1_764_403_600.0,
    "ask_end_date": 1_767_000_000.0,
    "created_at": 1_764_400_000.0,
}


def test_a_row_reads_into_hourly_prices():
    inc = read_row(ROW)
    assert (inc.pending_id, inc.instance_id) == (41, 1234)
    assert inc.old_gpu_dph == pytest.approx(0.4) and inc.new_gpu_dph == pytest.approx(0.5)
    assert inc.new_storage_gb_h is None  # null: unchanged
    assert inc.takes_effect_at == 1_764_403_600.0 and inc.new_end == 1_767_000_000.0
    assert inc.others_changed == ("bwd_cost",)


@pytest.mark.parametrize(
    "bad",
    [
        {"pending_price_increase_id": "41"},
        {"pending_price_increase_id": True},
        {"contract_id": None},
        {"contract_id": -3},
        {"new_gpu_costpersec": "0.0001\x1b[31m"},
        {"new_gpu_costpersec": float("nan")},
        {"new_gpu_costpersec": -0.001},
        {"new_gpu_costpersec": 1.0},  # $3600/h: no market's price
        {"contract_end_date": "tomorrow"},
        {"ask_end_date": float("inf")},
    ],
)
def test_a_row_that_cannot_be_read_is_refused(bad):
    with pytest.raises(MalformedAnswer):
        read_row({**ROW, **bad})


def test_one_bad_row_costs_that_row_only():
    good2 = {**ROW, "pending_price_increase_id": 42, "contract_id": 1235}
    rows = read_pending(
        {
            "success": True,
            "pending_price_increases": [ROW, "junk", {**ROW, "contract_id": "x"}, good2],
        }
    )
    assert [r.pending_id for r in rows] == [41, 42]


@pytest.mark.parametrize("answer", [[], "nope", {"success": False, "error": "x"}])
def test_an_answer_without_a_list_is_malformed(answer):
    with pytest.raises(MalformedAnswer):
        read_pending(answer)


def test_an_answer_without_rows_is_none_pending():
    assert read_pending({"success": True, "count": 0}) == []


async def test_the_client_lists_and_answers_on_the_cli_routes():
    seen: list[tuple[str, str, object]] = []

    def handler(r: httpx.Request) -> httpx.Response:
        body = json.loads(r.content) if r.content else None
        seen.append((r.method, r.url.path, body))
        if r.method == "GET":
            return httpx.Response(200, json={"success": True, "pending_price_increases": [ROW]})
        if body == {"pending_price_increase_id": 41}:
            return httpx.Response(200, json={"success": True, "pending_price_increase_id": 41})
        if body == {"pending_price_increase_id": 7}:
            return httpx.Response(409, json={"success": False, "error": "conflict"})
        if body == {"pending_price_increase_id": 8}:
            return httpx.Response(400, json={"success": False, "error": "invalid_args", "msg": "x"})
        return httpx.Response(
            404, json={"success": False, "error": "no_pending_price_increase", "msg": ""}
        )

    c = VastClient("http://m", "k", transport=httpx.MockTransport(handler), min_intervals={})
    (inc,) = await c.pending_price_increases()
    assert inc.pending_id == 41
    assert await c.answer_price_increase(41, accept=True) is True
    assert await c.answer_price_increase(99, accept=False) is False  # stale: 404
    assert await c.answer_price_increase(7, accept=True) is False  # stale: legacy 409
    with pytest.raises(ApiError):
        await c.answer_price_increase(8, accept=True)
    paths = [(m, p) for m, p, _ in seen]
    assert paths[:3] == [
        ("GET", "/api/v0/instances/pending-price-increases/"),
        ("PUT", "/api/v0/instances/accept-price-increase/"),
        ("PUT", "/api/v0/instances/reject-price-increase/"),
    ]
    await c.aclose()
