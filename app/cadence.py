"""The poll plan: which instances one poll asks the market about, under its paging and pacing.

With pages of 25 and one list call a second (the documented limits), a full list of 1,000
instances takes 40 s and of 10,000 several minutes, so a full list every poll would leave a
booting instance unseen for minutes. A small fleet (its full list fits in `FULL_PAGES` pages)
is still listed whole every poll. A larger one is asked about in two parts:

- *hot* instances, every poll: those still booting, running but not proven, being abandoned,
  and proven ones within a minute of the idle rule's stop (near a deadline). They are asked for by label with
  the list call's own filter (`{"label": {"in": [...]}}`, as `vastai show instances --label`
  sends it: vastai 1.9.1 `cli/commands/instances.py` show__instances); a hot instance without
  a label of its own gets a one-instance call (`show`), a few per poll;
- steady instances in trouble, every poll: one page of the list filtered by state
  (`{"actual_status": {"in": ["exited", "offline"]}}`, as `vastai show instances --status`
  sends it), so a proven rental whose container exited or whose host went offline is seen at
  once, not when the sweep reaches it;
- the rest by a *sweep*: the full list read a few pages per poll, its cursor kept between
  polls. Only a finished sweep is a full list answer, so only then is an instance it left out
  *unseen* (see `Observer.unlisted`); an instance a poll did not ask for is not unseen.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .attempt import Attempt
from .core.lifecycle import HELD, Phase
from .core.models import Instance
from .core.policy import Policy
from .fleet import Fleet

PAGE = 25  # rows per list page, the documented maximum
FULL_PAGES = 4  # a fleet whose full list fits in this many pages is listed whole every poll
# list calls a poll spends on hot and sweep pages: 5 s of pacing, inside a 10 s poll interval
LIST_CALLS = 6
SHOWS = 4  # one-instance calls a poll spends at most on hot instances without a label
# states a steady rental should not be in, asked for every poll (one page a poll, cursor kept)
TROUBLE = {"actual_status": {"in": ["exited", "offline"]}}
NEAR_S = 60.0  # market seconds before the idle rule's stop from which a rental is hot
HOT_PHASES = frozenset({Phase.REQUESTED, Phase.BOOTING, Phase.RUNNING, Phase.VERIFYING})


@runtime_checkable
class PagedMarket(Protocol):
    """A market that serves one filtered list page at a time (`VastClient` does)."""

    async def list_page(
        self,
        select_filters: dict[str, Any] | None = None,
        after_token: str | None = None,
        page_size: int = PAGE,
    ) -> tuple[list[Instance], str | None]: ...

    async def show_instance(self, instance_id: int) -> Instance | None: ...


@dataclass
class Sight:
    """What one poll saw. `full`: `rows` is a whole list answer (left out means unseen).
    `asked`: instances asked for by name whose absence earns a closer look, not `unseen`.
    `swept`: every id a sweep that ended this poll listed (None: no sweep ended)."""

    rows: list[Instance]
    full: bool
    asked: frozenset[int] = frozenset()
    swept: set[int] | None = None
    calls: int = 0  # list and show calls this poll made


@dataclass
class _Sweep:
    token: str | None = None
    seen: set[int] = field(default_factory=set)
    started: bool = False


def is_hot(a: Attempt, policy: Policy, now: float) -> bool:
    """Asked about every poll: booting, unproven, being given up, or within `NEAR_S` of the
    idle rule's stop (a fresh reading before a stop; an idle clock far from it needs none).
    Of what rentwatch did not create and only shows: only while it boots."""
    phase = a.life.phase
    if not a.owned:  # only shown: a boot is worth watching, a settled instance is not
        return phase in (Phase.REQUESTED, Phase.BOOTING)
    if phase in HOT_PHASES or phase == Phase.ABANDONED:
        return True
    return (
        phase == Phase.VERIFIED
        and a.util_low_since is not None
        and now - a.util_low_since >= policy.idle_grace_s - NEAR_S
    )


class Cadence:
    """Plans and makes one poll's list calls (see the module's docstring)."""

    def __init__(self, market: Any, fleet: Fleet, policy: Policy) -> None:
        self.market = market
        self.fleet = fleet
        self.policy = policy
        self.listed = 0  # rows in the last full list answer (whole or swept)
        self._sweep = _Sweep()
        self._show_turn = 0  # round robin over unlabelled hot instances
        self._trouble: str | None = None  # the next page of the state-filtered list

    def whole(self) -> bool:
        """List everything this poll: a small fleet, or a market without filtered pages."""
        if not isinstance(self.market, PagedMarket):
            return True
        # everything the poll must look at: supervised and observed alike
        watched = [a for a in self.fleet.attempts.values() if a.life.phase in HELD]
        size = max(len(watched), self.listed)
        return size <= FULL_PAGES * PAGE and not self._sweep.started

    async def fetch(self) -> Sight:
        """This poll's list calls; a market that can (`VastClient.polling`) gives up on each
        after a try or two, since the next poll retries it anyway."""
        polling = getattr(self.market, "polling", None)
        with polling() if callable(polling) else contextlib.nullcontext():
            return await self._fetch()

    async def _fetch(self) -> Sight:
        if self.whole():
            rows = await self.market.list_instances()
            self.listed = len(rows)
            return Sight(rows, True, calls=-(-max(1, len(rows)) // PAGE))
        return await self._split()

    async def _split(self) -> Sight:
        now = self.market.now()
        hot = [a for a in self.fleet.attempts.values() if is_hot(a, self.policy, now)]
        labels: dict[str, list[int]] = {}
        for a in hot:
            if a.label:
                labels.setdefault(a.label, []).append(a.instance_id)
        unlabelled = [a for a in hot if not a.label or len(labels.get(a.label, ())) > 1]
        unique = sorted(label for label, ids in labels.items() if len(ids) == 1)
        rows: list[Instance] = []
        calls = 0
        asked: set[int] = set()
        for i in range(0, len(unique), PAGE):  # every hot label, whatever the budget
            chunk = unique[i : i + PAGE]
            token: str | None = None
            while True:
                page, token = await self.market.list_page({"label": {"in": chunk}}, token)
                rows.extend(page)
                calls += 1
                if not token:
                    break
            asked.update(labels[label][0] for label in chunk)
        if unlabelled:
            start = self._show_turn % len(unlabelled)
            turn = (unlabelled[start:] + unlabelled[:start])[:SHOWS]
            self._show_turn += len(turn)
            for a in turn:
                inst = await self.market.show_instance(a.instance_id)
                calls += 1
                if inst is not None:
                    rows.append(inst)
                asked.add(a.instance_id)
        page, self._trouble = await self.market.list_page(TROUBLE, self._trouble)
        calls += 1
        rows.extend(page)
        swept = None
        for _ in range(max(1, LIST_CALLS - calls)):
            page, token = await self.market.list_page(None, self._sweep.token)
            calls += 1
            self._sweep.started = True
            rows.extend(page)
            self._sweep.seen.update(i.id for i in page)
            self._sweep.token = token
            if not token:
                swept, self._sweep = self._sweep.seen, _Sweep()
                self.listed = len(swept)
                break
        return Sight(rows, False, frozenset(asked), swept, calls)
