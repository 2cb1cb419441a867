"""A controller's team sync: a thread that ships the ledger's new events, pulls its teammates' into
the replica and beats its heartbeat; nothing the engine does waits on it. A failed round changes
nothing (a ship is one transaction) and the next starts from what the store says it holds."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ...core.text import clean
from .chain import GENESIS, chain
from .config import TeamConfig
from .store import StoreRefused, StoreUnavailable, TeamStore

if TYPE_CHECKING:
    from ..store import Ledger

SYNC_S = 2.0  # wall seconds between rounds
BEAT_S = 20.0  # wall seconds between heartbeats
SHIP_BATCH = 2000  # events per transaction
PULL_BATCH = 5000
BACKOFF_MAX_S = 30.0
# wall seconds between reads of the teammates' dud records (a quarantine is read every pull):
# their cost grows with the team's events (docs/team.md)
RECORDS_S = 30.0


class TeamSync:
    def __init__(
        self,
        ledger: Ledger,
        config: TeamConfig,
        market: str | None,
        campaign: str | None,
        log: Callable[[str], None] = lambda _line: None,
        sync_s: float = SYNC_S,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        import time

        self.ledger = ledger
        self.config = config
        self.store = TeamStore(config)
        self.replica = ledger.replica()
        self.replica.join(config.operator, market)
        self.ledger_id = self.replica.ledger_id
        self.campaign = campaign
        self.log = log
        self.sync_s = sync_s
        self._monotonic = monotonic or time.monotonic
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.head: tuple[int, str] | None = None  # (seq, hash) the store holds; None: ask it
        self.down: str | None = None  # why the last round failed (None: it did not)
        self.rounds = 0
        self.shipped = 0  # events shipped by this process
        self.pulled = 0  # teammates' events pulled by this process
        self._beat_at = -1e18
        self._records_at = -1e18  # when the teammates' dud records were last read

    # -- one round -----------------------------------------------------------------------
    def round(self) -> bool:
        """Ship, pull and beat once; False when the store could not be used (said once)."""
        try:
            if self.head is None:
                self.store.check_schema()
            self._ship_all()
            self._pull()
            if self._monotonic() - self._beat_at >= BEAT_S:
                self._beat(ended=False)
        except (StoreUnavailable, StoreRefused) as exc:
            self.head = None  # after a failure the store's word on its head is asked again
            why = f"{exc.title}: {exc}"
            if why != self.down:
                self.log(
                    f"team   {clean(why, 300)}; the campaign goes on, its events wait in the ledger"
                )
            self.down = why
            return False
        if self.down is not None:
            self.log(
                f"team   store back: {self.config.url} (head of this ledger: "
                f"{self.head[0] if self.head else 0})"
            )
            self.down = None
        self.rounds += 1
        return True

    def _ship_all(self) -> None:
        """Ship everything not in the store yet (the bench times it alone)."""
        if self.head is None:
            seq, h = self.store.head(self.ledger_id)
            self.head = (seq, h or GENESIS)
        while self._ship_batch():
            pass

    def _ship_batch(self) -> bool:
        """Ship the next batch after the store's head; whether a full batch went."""
        assert self.head is not None
        seq, prev = self.head
        rows = self.ledger.raw_events(seq, SHIP_BATCH)
        if not rows:
            return False
        links = chain(prev, self.ledger_id, self.config.operator, rows)
        self.store.ship(
            self.ledger_id,
            self.config.operator,
            [(r, p, h) for r, (p, h) in zip(rows, links, strict=True)],
        )
        self.head = (int(rows[-1][0]), links[-1][1])
        self.shipped += len(rows)
        return len(rows) == SHIP_BATCH

    def _pull(self) -> None:
        """The teammates' new events into the replica; their evidence read again if any came."""
        have = self.replica.cursors()
        before = self.pulled
        for ledger_id, operator in self.store.ledgers():
            if ledger_id == self.ledger_id:
                continue
            for rows in self.store.pull_all(ledger_id, have.get(ledger_id, 0), PULL_BATCH):
                self.pulled += self.replica.add(ledger_id, operator, rows)
        if self.pulled != before:
            records = self._monotonic() - self._records_at >= RECORDS_S
            self.replica.refresh(records)
            if records:
                self._records_at = self._monotonic()

    def _beat(self, ended: bool) -> None:
        self.store.beat(
            self.ledger_id,
            self.config.operator,
            self.campaign,
            socket.gethostname(),
            os.getpid(),
            self.head[0] if self.head else 0,
            ended,
        )
        self._beat_at = self._monotonic()

    # -- the thread ----------------------------------------------------------------------
    def start(self) -> TeamSync:
        """One round now, so a campaign starts from what the team knows when the store answers
        (a store that does not costs the connect timeout once), then rounds on a thread."""
        self.log(
            f"team   shipping to {self.config.url} as operator {self.config.operator} "
            f"(ledger {self.ledger_id[:8]})"
        )
        if self.round():
            self.log(f"team   {self.pulled} teammates' event(s) in the replica")
        self._thread = threading.Thread(target=self._run, name="rentwatch-team-sync", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        wait = self.sync_s
        while not self._stop.is_set():
            try:
                ok = self.round()
            except Exception as exc:  # a bug of ours or a row we cannot take: said, not fatal
                self.head = None
                self.log(f"team   sync round failed: {type(exc).__name__}: {clean(str(exc), 300)}")
                ok = False
            wait = self.sync_s if ok else min(BACKOFF_MAX_S, max(wait * 2, self.sync_s))
            self._stop.wait(wait)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the thread after a last round (what the campaign's end wrote is shipped when the
        store answers) and a heartbeat that says this controller ended."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # stuck on a slow store: its round is the last
                return
            self._thread = None
        if self.round():
            with contextlib.suppress(StoreUnavailable, StoreRefused):
                self._beat(ended=True)
        self.store.close()
