"""The policy's `wide_search`: how far a campaign's offer search reaches past Vast's default
(verified, not external), on the query sent, the offers kept, and a real search of the sim."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from rentwatch.core.errors import ConfigError, ConfigErrors
from rentwatch.core.models import Offer
from rentwatch.core.offers.search_scope import in_default_search, in_scope, widened
from rentwatch.core.offers.track_record import Memory, Record, Rental, remember
from rentwatch.core.policy import DEFAULT
from rentwatch.engine.offers import OfferBook
from rentwatch.market.factory import load_campaign
from rentwatch.market.vast.client import VastClient
from rentwatch.market.vast.rows import parse_offer
from rentwatch.referee.run import policy_from_spec

from .campaigns import campaign_text


def _offer(
    oid: int,
    machine: int,
    verified: bool | None,
    external: bool | None = False,
    verification: str | None = None,
    gpu: str = "RTX 3090",
) -> Offer:
    return Offer(
        oid,
        machine,
        1,
        gpu,
        1,
        0.2,
        0.2,
        0.1,
        12.4,
        0.99,
        "550.54.14",
        24576,
        "US",
        verified=verified,
        external=external,
        verification=verification,
    )


ONE_GPU = {"num_gpus": {"eq": 1}}
HEALTHY = [{"behaviour": "healthy", "share": 1}]


@pytest.mark.parametrize(
    ("query", "setting", "sent"),
    [
        (ONE_GPU, "off", ONE_GPU),
        (ONE_GPU, "explore", {**ONE_GPU, "verified": {}, "external": {}}),
        (ONE_GPU, "proven", {**ONE_GPU, "verified": {}, "external": {}}),
        # a campaign that names either field keeps its own terms, whatever the policy
        ({"verified": {"eq": True}}, "explore", {"verified": {"eq": True}}),
        ({"external": {"eq": False}}, "explore", {"external": {"eq": False}}),
        ({"verified": {}}, "proven", {"verified": {}}),
    ],
)
def test_the_search_is_widened_only_where_the_campaign_left_the_fields_to_vast(
    query: dict, setting: str, sent: dict
) -> None:
    assert widened(query, setting) == sent


def test_proven_keeps_outside_listings_only_where_our_record_saw_them_deliver() -> None:
    listed = _offer(1, 10, True)
    unsaid = _offer(2, 11, None, None)  # a row that does not say: as the default search lists it
    proven = _offer(3, 12, False)
    stranger = _offer(4, 13, False)
    failed = _offer(5, 14, False)
    external = _offer(6, 15, True, True)
    offers = [listed, unsaid, proven, stranger, failed, external]
    memory = Memory(
        machines={
            12: Record(delivered=1.5, failed=0.5),
            14: Record(delivered=0.5, failed=1.0),
            15: Record(),
        }
    )
    assert [in_default_search(o) for o in offers] == [True, True, False, False, False, False]
    assert in_scope(offers, ONE_GPU, "proven", memory) == [listed, unsaid, proven]
    assert in_scope(offers, ONE_GPU, "explore", memory) == offers
    assert in_scope(offers, ONE_GPU, "off", memory) == offers
    # the campaign asked for every listing itself: the policy takes nothing out
    assert in_scope(offers, {"verified": {}}, "proven", memory) == offers


def _rental(machine: int, gpu: str, *, jobs: int = 1, lost: int = 0, dud: bool = False) -> Rental:
    return Rental(machine, None, gpu, 0.2, 0.0, not dud, dud, jobs_finished=jobs, jobs_lost=lost)


def test_until_proven_explores_unverified_strangers_until_a_machine_of_a_listed_model_delivers() -> (
    None
):
    listed = _offer(1, 10, True, verification="verified")
    unverified = _offer(2, 11, False, verification="unverified")
    deverified = _offer(3, 12, False, verification="deverified")  # it failed Vast's test
    external = _offer(4, 13, False, True, verification="unverified")
    unsaid = _offer(5, 14, False)  # outside, and not said which: not tried
    elsewhere = _offer(6, 15, False, verification="unverified", gpu="RTX 4090")
    offers = [listed, unverified, deverified, external, unsaid, elsewhere]
    strangers = [listed, unverified, elsewhere]
    assert in_scope(offers, ONE_GPU, "until_proven", Memory()) == strangers
    # machines that only failed, or were only proven and never finished work, prove nothing
    unproven = remember([_rental(20, "RTX 3090", dud=True), _rental(21, "RTX 3090", jobs=0)], 0.0)
    assert in_scope(offers, ONE_GPU, "until_proven", unproven) == strangers
    assert (
        in_scope(offers, ONE_GPU, "until_proven", remember([_rental(22, "RTX 3090", lost=2)], 0.0))
        == strangers
    )
    # a machine that delivered work, of a model this search lists (here a verified one not listed
    # now): the campaign reaps, as `proven`, and the deverified one it once proved is kept
    reaped = remember([_rental(20, "RTX 3090"), _rental(12, "RTX 3090")], 0.0)
    assert in_scope(offers, ONE_GPU, "until_proven", reaped) == [listed, deverified]
    assert in_scope(offers, ONE_GPU, "proven", reaped) == [listed, deverified]
    # a machine proven on a model this campaign's search never lists is no reason to stop
    other = remember([_rental(30, "H100 SXM")], 0.0)
    assert in_scope(offers, ONE_GPU, "until_proven", other) == strangers
    # a campaign that named the default search's fields keeps them whatever the setting
    assert in_scope(offers, {"verified": {}}, "until_proven", Memory()) == offers


def test_an_offer_row_says_whether_it_is_verified_or_external() -> None:
    row = {"id": 1, "machine_id": 2, "dph_total": 0.3, "verified": False, "external": True}
    o = parse_offer(row)
    assert (o.verified, o.external, o.verification) == (False, True, None)
    said = parse_offer({**row, "verification": "deverified"})
    assert said.verification == "deverified"
    odd = parse_offer({**row, "verified": "yes", "external": None, "verification": {"x": 1}})
    assert (odd.verified, odd.external, odd.verification) == (None, None, None)


def test_the_setting_is_a_policy_setting_the_referee_can_ab() -> None:
    assert policy_from_spec('default+wide_search="explore"').wide_search == "explore"
    assert policy_from_spec('default+wide_search="until_proven"').wide_search == "until_proven"
    assert DEFAULT.wide_search == "off"
    with pytest.raises(ConfigErrors, match="one of off, proven, explore, until_proven"):
        DEFAULT.with_overrides({"wide_search": "everything"})
    with pytest.raises(ConfigError):
        policy_from_spec("default+wide_search=explore")  # not a TOML value


def _book(url: str, setting: str, query: str, memory: Memory | None = None) -> OfferBook:
    camp = load_campaign(campaign_text(extra="").replace("rentable=true", query))
    market = VastClient(url, "test-key", min_intervals={})
    journal = SimpleNamespace(say=lambda _text: None)
    policy = DEFAULT.with_overrides({"wide_search": setting})
    book = OfferBook(market, None, journal, None, camp, policy)  # type: ignore[arg-type]
    if memory is not None:
        book.remembered = lambda: memory  # type: ignore[method-assign]
    return book


def _searched(book: OfferBook) -> list[Offer]:
    async def go() -> list[Offer]:
        async with book.market:  # type: ignore[attr-defined]
            await book.refresh()
        return list(book.offers or ())

    return asyncio.run(go())


def test_the_sims_search_answers_the_widened_query_as_vast_would(make_sim) -> None:
    sim = make_sim(seed=4, offers=20, host_class=HEALTHY)
    usual = _searched(_book(sim.url, "off", "rentable=true"))
    assert usual and all(o.verified is True and o.external is False for o in usual)
    wide = _searched(_book(sim.url, "explore", "rentable=true"))
    outside = [o for o in wide if not in_default_search(o)]
    assert any(o.verified is False for o in outside) and any(o.external for o in outside)
    assert {o.id for o in usual} < {o.id for o in wide}
    pinned = _searched(_book(sim.url, "explore", "verified=true"))
    assert {o.id for o in pinned} == {o.id for o in usual}
    # proven: of the listings outside, only the machine our record saw deliver
    seen = outside[0]
    memory = Memory(machines={seen.machine_id: Record(delivered=1.0)})
    proven = _searched(_book(sim.url, "proven", "rentable=true", memory))
    assert {o.id for o in proven} == {o.id for o in usual} | {seen.id}
    # until_proven with nothing proven: the sim's unverified rows (its `verification` read), not
    # its external ones
    first = _searched(_book(sim.url, "until_proven", "rentable=true", Memory()))
    tried = [o for o in first if not in_default_search(o)]
    assert tried and {o.verification for o in tried} == {"unverified"}
    assert {o.id for o in first} == {o.id for o in usual} | {
        o.id for o in outside if o.verification == "unverified" and not o.external
    }
