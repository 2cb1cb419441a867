"""[J] Every billed rental is in the ledger, across a restart: a rental the controller could not
tie to its create (an answer that named another id, the label lookup failing too) and that the
next start finds carrying the campaign's label gets its create written down, so the ledger
bills it (found in the chaos long run: an instance the market billed, missing from the ledger)."""

from __future__ import annotations

import asyncio

import pytest
from rentwatch.core.policy import SEED
from rentwatch.engine.hosts.ssh import SSHRunner
from rentwatch.engine.supervisor import Supervisor
from rentwatch.market.errors import MarketUnavailable

from .fake_market import FakeMarket, campaign, offer
from .ledgers import new_ledger
from .test_supervisor_unit import key as key  # the module's SSH key fixture


def test_a_rental_with_no_create_in_the_ledger_gets_one_when_adopted(key):
    market = FakeMarket([offer(1, 10, 0.30)])
    ledger = new_ledger()

    async def go() -> None:
        first = Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)
        await first.prepare()
        market.lie_create_id = 0  # an id that cannot be new
        market.fail["list_instances"] = MarketUnavailable("down")  # and the label lookup fails
        assert await first.actions.create(market.offers[0], "rule:test", "r", "w") is None
        (iid,) = market.boxes
        await first.close()  # killed before a poll found it by its label
        market.t += 60
        again = Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)
        await again.prepare()  # the restart adopts what carries the label
        assert iid in again.attempts and again.fleet.creates == 1
        [row] = ledger.instance_rows()
        assert row["instance_id"] == iid and row["total_usd"] > 0
        await again.release_all("rule:campaign_end", "over")
        await again.close()
        assert market.boxes[iid].intended == "destroyed"

    asyncio.run(go())


def test_a_create_cut_short_by_a_kill_bills_its_storage_once_settled(key):
    """The controller dies between the create's intent and its outcome; the next start settles
    it from the label. The settled outcome carries the storage price (it is in the intent), so
    the ledger bills the disk as the market does (the chaos long run: one such rental billed no
    storage for 13 market hours, $0.14 under the market)."""
    market = FakeMarket([offer(1, 10, 0.30)])
    ledger = new_ledger()

    async def go() -> None:
        first = Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)
        await first.prepare()
        made = market.create_instance

        async def made_then_killed(*args, **kw):
            await made(*args, **kw)
            raise asyncio.CancelledError  # SIGKILL: the answer never came back

        market.create_instance = made_then_killed  # type: ignore[method-assign]
        with pytest.raises(asyncio.CancelledError):
            await first.actions.create(market.offers[0], "rule:test", "r", "w")
        await first.close()
        market.create_instance = made  # type: ignore[method-assign]
        market.t += 3600
        again = Supervisor(market, ledger, campaign(), SEED, SSHRunner(key), log=lambda _: None)
        await again.prepare()
        [row] = ledger.instance_rows()
        expected = 40 * 0.1 / 720  # the campaign's disk at the offer's $/GB/month
        assert row["storage_dph"] == pytest.approx(expected)
        assert row["storage_usd"] == pytest.approx(expected)  # one market hour
        await again.close()

    asyncio.run(go())
