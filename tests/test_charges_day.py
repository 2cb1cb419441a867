"""The market's charges need their `day` range (`select_filters.day` with `gte` and `lte`, as
`vastai show invoices-v1 --charges` always sends it): the simulator refuses a query without
one, as the real endpoint does; the client always sends one; and rows whose metadata carries
more than a label (`template_id`, `endpoint_id`, Vast's serverless ids) are read all the same."""

from __future__ import annotations

import json

import httpx
import pytest
from rentwatch.ledger.reconcile import market_by_instance
from rentwatch.market.vast.client import VastClient

HEALTHY = [{"behaviour": "healthy", "share": 1.0, "gpu": ["RTX 4090"], "dph": [0.3, 0.4]}]


@pytest.mark.parametrize(
    "filters",
    [
        None,
        {},
        {"type": {"in": ["instance"]}},
        {"day": {"gte": 1_764_000_000}},
        {"day": {"gte": "yesterday", "lte": 1_764_400_000}},
        {"day": 5},
    ],
)
def test_the_sim_refuses_charges_without_a_day_range(make_sim, filters):
    sim = make_sim(seed=5, offers=2, time_scale=1, host_class=HEALTHY, pacing=False)
    params = {} if filters is None else {"select_filters": json.dumps(filters)}
    r = httpx.get(
        f"{sim.url}/api/v0/charges/", params=params, headers={"Authorization": "Bearer test-key"}
    )
    assert r.status_code == 400 and r.json()["error"] == "invalid_args"


async def test_the_client_sends_its_day_range(make_sim):
    sim = make_sim(seed=5, offers=2, time_scale=1, host_class=HEALTHY, pacing=False)
    m = sim.market
    inst = sim.call(lambda: m.create(m.machines[0].offer_id, "img", 10, "lab", {}, None))
    sim.call(lambda: m.clock.advance(3600))
    async with VastClient(sim.url, "test-key", min_intervals={}) as c:
        rows = await c.charges(inst.created_at, m.clock.now())
    assert [r["source"] for r in rows] == [f"instance-{inst.id}"]


def test_metadata_with_template_and_endpoint_ids_is_read():
    rows = [
        {
            "type": "instance",
            "source": "instance-77",
            "amount": 0.5,
            "metadata": {"label": "x", "template_id": 12345, "endpoint_id": "\x1b[2Jep"},
            "items": [
                {"type": "gpu", "amount": 0.4, "metadata": {"endpoint_id": 9, "workergroup_id": 3}},
                {"type": "disk", "amount": 0.1, "metadata": None},
            ],
        },
        {
            "type": "instance",
            "source": "instance-78",
            "amount": "0.25",
            "metadata": {"template_id": None, "endpoint_id": None, "instance_id": "78"},
            "items": None,
        },
        {
            "type": "serverless",
            "source": "endpoint-9",
            "amount": 3.0,
            "metadata": {"endpoint_id": 9},
        },
    ]
    got = market_by_instance(rows)
    assert set(got) == {77, 78}
    assert got[77].usd == pytest.approx(0.5) and got[77].by_kind == {"gpu": 0.4, "disk": 0.1}
    assert got[78].usd == pytest.approx(0.25)
