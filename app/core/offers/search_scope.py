"""How far a campaign's offer search reaches past Vast's default search (verified, not external):
the policy's `wide_search`. Pure.

Vast's own `verified` flag is the host's standing with Vast, not our record of what a machine
delivered; the cheapest delivering machines are often unverified or deverified listings
(docs/benchmarks.md, "How much of the floor a campaign can reach"). A campaign whose query names
`verified` or `external` (`verified=true`, `verified=any`) keeps its own terms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..models import Offer
from .track_record import Memory

# a campaign's offer filter, `{field: {op: value}}` (campaign.OfferTerms, which imports the policy)
OfferTerms = dict[str, dict[str, Any]]

# off: Vast's default search. proven: also the listings outside it whose machine our record saw
# deliver more than fail. explore: every listing, ranked by our odds like any other.
# until_proven: as proven, and the unverified listings too while our record holds no machine of
# a model the search lists that finished work
WIDE_SEARCHES = ("off", "proven", "explore", "until_proven")
NARROWED = ("proven", "until_proven")  # the settings that keep only some of what they search
DEFAULT_FIELDS = ("verified", "external")  # the default search's terms a policy may lift


def widens(query: OfferTerms, setting: str) -> bool:
    """Whether the policy lifts the default search's terms on this campaign's query."""
    return setting != "off" and not any(f in query for f in DEFAULT_FIELDS)


def widened(query: OfferTerms, setting: str) -> OfferTerms:
    """The campaign's query as the policy searches it: where it widens, no filter on `verified`
    and `external` (`{}`: the official CLI's `verified=any`)."""
    out = dict(query)
    if widens(query, setting):
        out.update({f: {} for f in DEFAULT_FIELDS})
    return out


def in_default_search(o: Offer) -> bool:
    """Whether Vast's default search lists the offer (a row that does not say counts as listed)."""
    return o.verified is not False and o.external is not True


def exploring(offers: Sequence[Offer], memory: Memory) -> bool:
    """Whether `until_proven` may try strangers now: while no machine our record holds has
    finished work and delivered more than it failed on a GPU model this search lists (the
    campaign's own terms chose the models). Once one has, the campaign reaps what it proved."""
    return not memory.proven_models() & {o.gpu_name for o in offers}


def explorable(o: Offer) -> bool:
    """A stranger `until_proven` may try: an unverified listing of Vast's own market, never one
    that lost its verification (`deverified`: it failed Vast's test) nor an external one."""
    return o.verification == "unverified" and o.external is not True


def in_scope(
    offers: Sequence[Offer], query: OfferTerms, setting: str, memory: Memory
) -> list[Offer]:
    """The offers a widened search keeps: a listing outside the default search where its
    machine's faded record delivered more than it failed, and under `until_proven` the
    strangers it may try while it explores; all of them under `explore`, as under `off` or a
    campaign's own terms."""
    if setting not in NARROWED or not widens(query, setting):
        return list(offers)
    history = memory.history()
    explore = setting == "until_proven" and exploring(offers, memory)
    return [
        o
        for o in offers
        if in_default_search(o)
        or _delivered(history.get(o.machine_id))
        or (explore and explorable(o))
    ]


def _delivered(record: tuple[float, float, float] | None) -> bool:
    return record is not None and record[0] > 0 and record[0] > record[1]
