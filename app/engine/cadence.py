"""The poll plan: which instances one poll asks the market about, under its paging and pacing.

With pages of 25 and one list call a second, a full list of 1,000 instances takes 40 s, so a
booting instance would go unseen for minutes. A fleet within `FULL_PAGES` is listed whole; a
larger one is asked about as hot instances by label each poll (booting, unproven, near a stop),
one page filtered to `exited`, and the rest by a sweep whose cursor is kept between polls. Only a
finished sweep is a full answer, so only then is an instance it left out unseen. `offline` is not
filtered by: Vast computes it from the heartbeat and does not store it.

A failed call costs what it asked for, not the poll: a market that refuses a filter is listed
whole from then on, a looping `next_token` is cut off after `HOT_PAGES`. Evidence from outside
the poll (a verified webhook) asks for one now (`soon`)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..core.errors import BadRow
from ..core.lifecycle import HELD, IN_FLIGHT, Phase
from ..core.models import Instance, Status
from ..core.policy import Policy
from ..market.errors import REFUSALS, ApiError, AuthError, NotFound
from ..market.protocol import PAGE, ListFilter, Market
from .attempt import Attempt
from .fleet import Fleet
from .journal import Journal
from .updates import Set

FULL_PAGES = 4  # a fleet whose full list fits in this many pages is listed whole every poll
# list calls a poll spends on hot and sweep pages: 5 s of pacing, inside a 10 s poll interval
LIST_CALLS = 6
SHOWS = 4  # one-instance calls a poll spends at most on hot instances without a label
# pages one chunk of hot labels may take: it asks for at most a page's worth of unique labels,
# so a market whose next_token goes on past this loops (a whole list's bound: the client's)
HOT_PAGES = 4
# states a steady rental should not be in, asked for every poll (one page a poll, cursor kept)
TROUBLE = ListFilter(statuses=(Status.EXITED,))
NEAR_S = 60.0  # market seconds before the idle rule's stop from which a rental is hot


@dataclass
class Sight:
    """What one poll saw. `full`: `rows` is a whole list answer (left out means unseen). `asked`:
    instances asked for by name. `swept`: every id a sweep that ended this poll listed."""

    rows: list[Instance]
    full: bool
    asked: frozenset[int] = frozenset()
    swept: set[int] | None = None
    calls: int = 0  # list and show calls this poll made
    bad: list[tuple[int, str]] = field(default_factory=list)  # shown rows that cannot be read


@dataclass
class _Sweep:
    token: str | None = None
    seen: set[int] = field(default_factory=set)
    started: bool = False


def is_hot(a: Attempt, policy: Policy, now: float) -> bool:
    """Asked about every poll: booting, unproven, being given up, or within `NEAR_S` of the idle
    rule's stop; of what rentwatch only shows, only while it boots."""
    phase = a.life.phase
    if not a.owned:  # only shown: a boot is worth watching, a settled instance is not
        return phase in (Phase.REQUESTED, Phase.BOOTING)
    if phase in IN_FLIGHT or phase == Phase.ABANDONED:
        return True
    return (
        phase == Phase.VERIFIED
        and a.util_low_since is not None
        and now - a.util_low_since >= policy.idle_grace_s - NEAR_S
    )


class Cadence:
    """Plans and makes one poll's list calls (see the module's docstring)."""

    def __init__(
        self,
        market: Market,
        fleet: Fleet,
        policy: Policy,
        journal: Journal,
    ) -> None:
        self.market = market
        self.fleet = fleet
        self.policy = policy
        self.journal = journal
        self.say = journal.say  # the decision log
        self.listed = 0  # rows in the last full list answer (whole or swept)
        self.refused: str | None = None  # why the market's filters are not used (it refused)
        self._sweep = _Sweep()
        self._show_turn = 0  # round robin over unlabelled hot instances
        self._trouble: str | None = None  # the next page of the state-filtered list
        self.look_now: set[int] = set()  # asked for by evidence (a market webhook): next poll
        self.wake = asyncio.Event()  # set: the poll loop polls now instead of at its interval

    def soon(self, named: Iterable[int]) -> None:
        """Evidence says look now: a poll at once (`rounds` waits on `wake`) about `named`."""
        self.look_now.update(named)
        self.wake.set()

    def whole(self) -> bool:
        """List everything this poll: a small fleet, or a market without (or refusing) filtered
        pages."""
        if not self.market.caps.paging or self.refused is not None:
            return True
        # everything the poll must look at: supervised and observed alike
        watched = [a for a in self.fleet.attempts.values() if a.life.phase in HELD]
        size = max(len(watched), self.listed)
        return size <= FULL_PAGES * PAGE and not self._sweep.started

    async def fetch(self) -> Sight:
        """This poll's list calls; a market may give up on each after a try or two: the next poll
        retries."""
        with self.market.polling():
            return await self._fetch()

    async def _fetch(self) -> Sight:
        if self.whole():
            return await self._whole()
        try:
            return await self._split()
        except AuthError:
            raise
        except ApiError as exc:  # a filter refused: its part of the plan cannot be asked
            self.refused = f"{exc}"
            self._sweep = _Sweep()
            self.say(
                f"poll   the market refused a filtered list ({exc}): "
                "the whole list every poll from now on"
            )
            return await self._whole()

    async def _whole(self) -> Sight:
        self.look_now.clear()  # every instance is in the answer
        for a in self.fleet.attempts.values():
            self.journal.writer.emit(Set(a, {"look_wanted": False}))
        rows = await self.market.list_instances()
        self.listed = len(rows)
        return Sight(rows, True, calls=-(-max(1, len(rows)) // PAGE))

    async def _split(self) -> Sight:
        now = self.market.now()
        hot = [a for a in self.fleet.attempts.values() if is_hot(a, self.policy, now)]
        labels: dict[str, list[int]] = {}
        for a in hot:
            if a.label:
                labels.setdefault(a.label, []).append(a.instance_id)
        unlabelled = [a for a in hot if not a.label or len(labels.get(a.label, ())) > 1]
        unique = sorted(label for label, ids in labels.items() if len(ids) == 1)
        sight = Sight([], False)
        asked: set[int] = set()
        for i in range(0, len(unique), PAGE):  # every hot label, whatever the budget
            chunk = unique[i : i + PAGE]
            if await self._hot_pages(ListFilter(labels=chunk), sight):
                asked.update(labels[label][0] for label in chunk)
        if unlabelled:
            start = self._show_turn % len(unlabelled)
            turn = (unlabelled[start:] + unlabelled[:start])[:SHOWS]
            self._show_turn += len(turn)
            for a in turn:
                if await self._show(a.instance_id, sight):
                    asked.add(a.instance_id)
        # what evidence named (a webhook; a heartbeat without an answer): a look of our own
        silent = [a for a in self.fleet.attempts.values() if a.look_wanted]
        for a in silent:
            self.journal.writer.emit(Set(a, {"look_wanted": False}))
        wanted = sorted(self.look_now | {a.instance_id for a in silent} - asked)
        self.look_now = set(wanted[2 * SHOWS :])  # the rest next poll
        for iid in wanted[: 2 * SHOWS]:
            if await self._show(iid, sight):
                asked.add(iid)
        sight.asked = frozenset(asked)
        await self._trouble_page(sight)
        await self._sweep_pages(sight)
        return sight

    async def _hot_pages(self, filters: ListFilter, sight: Sight) -> bool:
        """Every page of one filtered list into `sight`; False when it did not end, so what it left
        out is not known to be missing. A refused first page is the filter refused: raised."""
        token: str | None = None
        for _ in range(HOT_PAGES):
            try:
                page, token = await self.market.list_page(filters, token)
            except ApiError as exc:
                if token is None or isinstance(exc, AuthError):
                    raise
                self.say(f"poll   the hot list's next page was refused ({exc})")
                return False
            sight.rows.extend(page)
            sight.calls += 1
            if not token:
                return True
        self.say(f"poll   the hot list did not end after {HOT_PAGES} pages (next_token loops)")
        return False

    async def _show(self, instance_id: int, sight: Sight) -> bool:
        """One hot instance without a label of its own. True when the market answered for it; a
        refusal or an unreadable row leaves it unanswered this poll."""
        sight.calls += 1
        try:
            inst = await self.market.show_instance(instance_id)
        except AuthError:
            raise
        except NotFound:
            return True
        except BadRow as exc:
            sight.bad.append((instance_id, exc.problem))
            return False
        except REFUSALS as exc:
            self.say(f"poll   i:{instance_id} unanswered this poll: {exc}")
            return False
        if inst is not None:
            sight.rows.append(inst)
        return True

    async def _trouble_page(self, sight: Sight) -> None:
        """One page of the state-filtered list; a refused cursor starts it again next poll."""
        try:
            page, token = await self.market.list_page(TROUBLE, self._trouble)
        except ApiError as exc:
            if self._trouble is None or isinstance(exc, AuthError):
                raise  # the filter itself refused (or the key)
            self.say(f"poll   the market refused the state list's cursor ({exc}): restarted")
            self._trouble = None
            return
        self._trouble = token
        sight.calls += 1
        sight.rows.extend(page)

    async def _sweep_pages(self, sight: Sight) -> None:
        """A few pages of the full list; the sweep's end makes `sight.swept`."""
        for _ in range(max(1, LIST_CALLS - sight.calls)):
            try:
                page, token = await self.market.list_page(None, self._sweep.token)
            except AuthError:
                raise
            except ApiError as exc:  # its cursor refused: start again, next poll
                self.say(f"poll   the market refused the sweep's page ({exc}): it starts again")
                self._sweep = _Sweep()
                return
            sight.calls += 1
            self._sweep.started = True
            sight.rows.extend(page)
            self._sweep.seen.update(i.id for i in page)
            self._sweep.token = token
            if not token:
                sight.swept, self._sweep = self._sweep.seen, _Sweep()
                self.listed = len(sight.swept)
                return
