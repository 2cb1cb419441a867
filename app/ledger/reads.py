"""The ledger's named reads: the engine's questions of the ledger, each as fixed SQL, so the engine
never writes `where=` text. `Ledger` (store.py) inherits them."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.offers.track_record import Rental
from .event import Event
from .kinds import EventKind
from .records import RENTAL_RECORD_SQL, SPEEDS_SQL

SPEED_SHARE_MAX = 1.25  # as engine/jobs/delivered.RESUMED_OVER
T = TypeVar("T")


class NamedReads:
    """The named reads, over the ledger's `events` and `_rows` (store.py)."""

    if TYPE_CHECKING:  # supplied by Ledger, which holds the connection

        def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

        def events(self, where: str = "true", params: Sequence[Any] = ()) -> list[Event]: ...

        def _written(self) -> int | None: ...

        _records: dict[str, tuple[int, Any]]

    def _record_read(self, name: str, read: Callable[[], T]) -> T:
        """Our record of rentals and machines, read again only once this ledger wrote an event since
        (each read is tenths of a second, asked every market minute). A ledger another process
        writes (`_written` None) is read every time."""
        seq = self._written()
        hit = self._records.get(name)
        if seq is None or hit is None or hit[0] != seq:
            hit = (seq if seq is not None else -1, read())
            if seq is not None:
                self._records[name] = hit
        return copy.copy(hit[1])  # a caller's change never reaches the next caller

    def campaign_events(self, campaign: str, *kinds: EventKind, after: int = 0) -> list[Event]:
        """This campaign's events of the given kinds after seq `after`, oldest first."""
        marks = ", ".join("?" * len(kinds))
        return self.events(
            where=f"campaign = ? AND seq > ? AND kind IN ({marks})",
            params=[campaign, after, *map(str, kinds)],
        )

    def campaign_started_at(self, campaign: str) -> float | None:
        """When this campaign first started (its deadline counts from there)."""
        starts = self.campaign_events(campaign, EventKind.CAMPAIGN_START)
        return starts[0].at if starts else None

    def creates_made(self, campaign: str) -> int:
        """Creates of this campaign that happened (outcome ok)."""
        row = self._rows(
            "SELECT count(*) FROM events WHERE kind = 'create' AND phase = 'outcome' AND ok "
            "AND campaign = ?",
            [campaign],
        )
        return int(row[0][0]) if row else 0

    def wrote_label(self, campaign: str, label: str) -> bool:
        """Whether a create of `campaign` in this ledger carried `label` (its intent names
        the label before the market answers, so a create whose answer was lost counts)."""
        row = self._rows(
            "SELECT count(*) FROM events WHERE kind = 'create' AND campaign = ? "
            "AND json_extract_string(detail, '$.label') = ?",
            [campaign, label],
        )
        return bool(row and row[0][0])

    def campaign_holds_on(self, campaign: str) -> bool:
        """Whether `campaign` still counts on what it holds: started and not ended, or detached."""
        K = EventKind
        ends = self.campaign_events(campaign, K.CAMPAIGN_START, K.CAMPAIGN_END, K.DETACHED)
        last_start = max((e.seq for e in ends if e.kind == "campaign_start"), default=None)
        if last_start is None:
            return False
        after = [e.kind for e in ends if e.seq > last_start]
        return "campaign_end" not in after or "detached" in after

    def instance_history(self, instance_id: int) -> list[Event]:
        return self.events(where="instance_id = ?", params=[instance_id])

    def instance_events(self, instance_id: int, campaign: str, last: int = 200) -> list[Event]:
        """One instance's events in one campaign, the newest `last` of them, oldest first."""
        return self.events(
            where="instance_id = ? AND campaign = ? AND seq >= coalesce((SELECT min(seq) FROM "
            "(SELECT seq FROM events WHERE instance_id = ? AND campaign = ? "
            "ORDER BY seq DESC LIMIT ?)), 0)",
            params=[instance_id, campaign, instance_id, campaign, int(last)],
        )

    def tries(self, intent_seq: int) -> list[Event]:
        """The tries of one change, as they went out."""
        return self.events(where="kind = 'sent' AND intent_seq = ?", params=[intent_seq])

    def rentals(self) -> list[Rental]:
        """Every rental that is evidence of its host, every campaign, with what it delivered
        (`records.RENTAL_RECORD_SQL`): what `core.offers.track_record` fades and sums."""
        return self._record_read(
            "rentals", lambda: [Rental(*r) for r in self._rows(RENTAL_RECORD_SQL)]
        )

    def bid_exposure(self) -> list[tuple[int, str, float, int]]:
        """Per bid rental, every campaign: (machine, model, hours running on bid, outbids)."""
        rows = self._rows("SELECT machine_id, gpu_name, run_h, outbids FROM bid_exposure")
        return [(int(m), str(g), float(h), int(n)) for m, g, h, n in rows if m is not None]

    def machine_speeds(self) -> dict[int, float]:
        """Machine id -> the mean share of its model's speed its jobs got there (sized jobs
        and jobs with a progress reading): what the ranking by delivered work reads."""
        return self._record_read("machine_speeds", self._machine_speeds)

    def _machine_speeds(self) -> dict[int, float]:
        rows = self._rows(SPEEDS_SQL)
        # a ledger written before resumed jobs were told apart may hold a share many times
        # the model's (a job's size over the minutes it took after a checkpoint): no card
        # computes a quarter above its model, so none is read as faster
        return {
            int(m): min(float(v), SPEED_SHARE_MAX)
            for m, v in rows
            if m is not None and v is not None
        }

    def throttled_instances(self) -> set[int]:
        rows = self._rows("SELECT DISTINCT instance_id FROM events WHERE kind = 'throttle'")
        return {int(r[0]) for r in rows if r[0] is not None}

    def unfinished_intents(self) -> list[Event]:
        return self.events(
            where="phase = 'intent' AND seq NOT IN "
            "(SELECT intent_seq FROM events WHERE intent_seq IS NOT NULL AND phase = 'outcome')"
        )

    def quarantined(self, now: float) -> dict[int, str]:
        """Machine id -> reason, for every quarantine still in force at `now`."""
        rows = self._rows("SELECT machine_id, reason, until FROM quarantine")
        return {int(m): str(r) for m, r, until in rows if until is None or until > now}

    def last_event_at(self, campaign: str) -> float | None:
        """When this campaign last recorded anything (its controller's last sign of life)."""
        rows = self._rows("SELECT max(ts) FROM events WHERE campaign = ?", [campaign])
        row = rows[0] if rows else None
        return None if row is None or row[0] is None else float(row[0])
