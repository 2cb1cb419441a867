"""The operator's acts, as the screens' keys ask for them: each becomes a typed intent sent to
the engine (in this process, or a controller's), asked first where it loses something, and
answered with a toast. The fleet and detail screens call these with the instance they show;
nothing here calls the market or writes to the ledger."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Iterable
from typing import Any

from rentwatch.core.text import clean
from rentwatch.engine.intents import (
    AFTER_END,
    CreateIntent,
    DestroyConfirmation,
    DestroyIntent,
    EndIntent,
    FleetSizeIntent,
    HandOverIntent,
    Intent,
    Reply,
    StartIntent,
    StopIntent,
)
from rentwatch.ledger.holdings import Holding, read_holdings
from rentwatch.views.acts import gone, left_after_end, startable
from rentwatch.views.port import EnginePort, LedgerPort
from rentwatch.views.snapshot import FleetReadout, InstanceSnap
from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

from .end_dialog import EndConfirm
from .modals import BulkDestroyConfirm, DestroyConfirm, hand_over_choice, stop_choice

# the intent each screen's act sends: after the end a key is offered only where the engine's
# rule (`AFTER_END`) takes its intent
SENDS: dict[str, type[Intent]] = {
    "stop": StopIntent,
    "start": StartIntent,
    "destroy": DestroyIntent,
    "bulk_destroy": DestroyIntent,
    "hand_over": HandOverIntent,
    "create": CreateIntent,
    "fleet_more": FleetSizeIntent,
    "fleet_less": FleetSizeIntent,
}


class Operator:
    """Turns the operator's keys into intents. `latest` gives the snapshot the app last
    received (the fleet's size and policy, what a bulk destroy covers)."""

    def __init__(
        self,
        app: App[Any],
        engine: EnginePort,
        ledger: LedgerPort,
        latest: Callable[[], FleetReadout | None],
    ) -> None:
        self.app = app
        self.engine = engine
        self.ledger = ledger
        self.latest = latest
        self._ui_thread = threading.get_ident()

    def controller_ended(self) -> str | None:
        """Why the controller this dashboard is attached to ended on its own (None: it
        serves, or the engine runs in this process): nothing that asks it can act now."""
        return self.engine.ended

    def campaign_ended(self) -> bool:
        snap = self.latest()
        return snap is not None and snap.finished is not None

    def refused_after_end(self, action: str) -> bool:
        """Whether the campaign has ended and the engine would refuse what `action` sends."""
        sends = SENDS.get(action)
        return sends is not None and not issubclass(sends, AFTER_END) and self.campaign_ended()

    def say_refused(self, screen: Screen[Any], key: str) -> bool:
        """Say why a key the screen has switched off does nothing (a silent key reads as a
        hung dashboard); True when `key` was one of those."""
        keyed = (b for b in Binding.make_bindings(screen.BINDINGS) if b.key == key)
        action = next((b.action for b in keyed), None)
        if action is None or screen.check_action(action, ()):
            return False
        why = self.controller_ended()
        if why is not None:
            self.app.notify(f"the controller has ended ({why}): nothing can act now", timeout=4)
        elif self.campaign_ended():
            self.app.notify(
                "the campaign has ended: it starts and takes over nothing new", timeout=4
            )
        else:
            return False
        return True

    def instance(self, instance_id: int | None) -> InstanceSnap | None:
        """The latest snapshot of `instance_id` (None: not in the fleet's latest)."""
        snap = self.latest()
        if snap is None or instance_id is None:
            return None
        return next((s for s in snap.instances if s.instance_id == instance_id), None)

    # -- sending -----------------------------------------------------------------------------
    def send(self, done_text: str, intent: Intent, failed_text: str) -> None:
        """Submit `intent`; say `done_text` when it took, `failed_text: why` when it did not."""
        fut = self.engine.submit(intent)

        def done(f: concurrent.futures.Future[Any]) -> None:
            exc = f.exception()
            reply: Reply | None = None if exc is not None else f.result()
            if reply is not None and reply.done:
                self.tell(done_text, "information")
            else:
                why = exc if reply is None else reply.message
                self.tell(clean(f"{failed_text}: {why}", 300), "error")

        fut.add_done_callback(done)

    def tell(self, text: str, severity: str, timeout: float = 5) -> None:
        """A toast from whichever thread an answer arrives on."""
        self.on_ui(self.app.notify, text, severity=severity, timeout=timeout)

    def on_ui(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> None:
        """Run `fn` on the UI thread, from whichever thread an answer arrives on."""
        if threading.get_ident() == self._ui_thread:  # answered at once (no engine running)
            fn(*args, **kw)
        else:  # answered on the engine's thread, or the controller client's
            self.app.call_from_thread(fn, *args, **kw)

    # -- one instance ------------------------------------------------------------------------
    def _gone(self, s: InstanceSnap) -> bool:
        """Whether it no longer exists on the market: no key may act on it (say so)."""
        if gone(s):
            self.app.notify(f"{s.instance_id} is already gone ({s.phase})", severity="warning")
            return True
        return False

    def stop(self, s: InstanceSnap | None) -> None:
        """A stop that interrupts a job or lowers the wanted fleet asks first, saying so (the
        instance is the one shown when the key was pressed, whatever moves meanwhile)."""
        snap = self.latest()
        if s is None or snap is None or self._gone(s):
            return
        if s.phase == "stopped":  # `s` said "stopped" and nothing happened: say so instead
            self.app.notify(
                f"{s.instance_id} is stopped already: nothing to stop", severity="warning"
            )
            return

        def stop(choice: str | None = "stop") -> None:
            if choice != "stop":
                self.app.notify(f"stop cancelled: {s.instance_id} left as it is")
                return
            self.send(
                f"stopped {s.instance_id}",
                StopIntent(s.instance_id),
                f"could not stop {s.instance_id}",
            )

        question = stop_choice(s, snap.fleet)
        if question is None:
            stop()
        else:
            self.app.push_screen(question, stop)

    def start(self, s: InstanceSnap | None) -> None:
        """A start of a stopped rental (or one an outbid paused). On one that runs, `a` said
        "started" while the engine wrote an illegal move into the ledger: it says so instead."""
        if s is None or self._gone(s):
            return
        if not startable(s):
            self.app.notify(
                f"{s.instance_id} is {s.phase}: nothing to start (a starts a stopped rental)",
                severity="warning",
            )
            return
        self.send(
            f"started {s.instance_id}",
            StartIntent(s.instance_id),
            f"could not start {s.instance_id}",
        )

    def destroy(self, s: InstanceSnap | None) -> None:
        if s is None or self._gone(s):
            return

        def confirmed(typed: str | None) -> None:
            if typed is None:
                self.app.notify("destroy cancelled: nothing destroyed")
                return
            conf = DestroyConfirmation(s.instance_id, typed)
            self.send(
                f"destroyed {s.instance_id}",
                DestroyIntent(conf),
                f"could not destroy {s.instance_id}",
            )

        snap = self.latest()
        rentals = [i.instance_id for i in snap.instances] if snap else [s.instance_id]
        self.app.push_screen(DestroyConfirm(s, rentals), confirmed)

    def hand_over(self, s: InstanceSnap | None) -> None:
        snap = self.latest()
        if s is None or snap is None or self._gone(s):
            return
        if s.supervised:
            self.app.notify(f"{s.instance_id} is automation's already", timeout=4)
            return

        def chosen(choice: str | None) -> None:
            if choice != "hand_over":
                self.app.notify(f"hand-over cancelled: {s.instance_id} stays observed")
                return
            self.send(
                f"handed {s.instance_id} over to automation",
                HandOverIntent(s.instance_id),
                f"could not hand {s.instance_id} over",
            )

        self.app.push_screen(hand_over_choice(s, snap.policy), chosen)

    # -- the fleet ---------------------------------------------------------------------------
    def create(self) -> None:
        self.send(
            "asked the market for one more instance",
            CreateIntent(),
            "could not create one more instance",
        )

    def resize(self, delta: int) -> None:
        snap = self.latest()
        if snap is None:
            return
        size = max(0, snap.fleet + delta)
        if size == snap.fleet:  # `-` at 0: nothing to ask the controller, nothing to record
            self.app.notify(f"the wanted fleet is {size} already", severity="warning")
            return
        self.send(
            f"wanted fleet {snap.fleet} -> {size}",
            FleetSizeIntent(size),
            f"could not set the wanted fleet to {size}",
        )

    def bulk_candidates(self) -> list[InstanceSnap]:
        snap = self.latest()
        return snap.bulk_candidates() if snap else []

    def bulk_destroy(self) -> None:
        doomed = self.bulk_candidates()
        if not doomed:
            self.app.notify("no stopped rental that never verified or went offline", timeout=4)
            return

        def confirmed(ok: str | None) -> None:
            if not ok:
                self.app.notify("bulk destroy cancelled: nothing destroyed")
                return
            # the typed confirmation covered this very list, as it stood: one started (or
            # gone) while the dialog was open is left alone
            still = {s.instance_id for s in self.bulk_candidates()}
            for s in doomed:
                if s.instance_id not in still:
                    self.app.notify(f"{s.instance_id} changed meanwhile: not destroyed")
                    continue
                conf = DestroyConfirmation(s.instance_id, str(s.instance_id))
                self.send(
                    f"destroyed {s.instance_id}",
                    DestroyIntent(conf),
                    f"could not destroy {s.instance_id}",
                )

        self.app.push_screen(BulkDestroyConfirm(tuple(doomed)), confirmed)

    # -- the end -----------------------------------------------------------------------------
    def read_holdings(self, campaign: str) -> None:
        """What the campaign holds, read from the ledger in a thread worker, then listed in
        the End dialog, confirmed by the campaign's name."""
        self.app.run_worker(
            lambda: self._read_holdings(campaign),
            thread=True,
            exclusive=True,
            group="holdings",
            exit_on_error=False,
        )

    def _read_holdings(self, campaign: str) -> None:
        held: list[Holding] = []
        error = ""
        try:
            held = read_holdings(self.ledger, campaign)
        except Exception as exc:  # said in the dialog: the end still destroys what is held
            error = f"{type(exc).__name__}: {exc}"
        self.app.call_from_thread(self._ask_end, campaign, held, error)

    def _ask_end(self, campaign: str, held: list[Holding], error: str) -> None:
        if not held and not error and self.campaign_ended():  # no name to type over nothing
            self.app.notify(
                f"{clean(campaign, 60)} has ended and holds nothing: nothing left to end",
                timeout=6,
            )
            return

        def confirmed(typed: str | None) -> None:
            if typed is None:
                self.app.notify("end cancelled: nothing ended, nothing destroyed")
                return
            self.send_end(campaign, typed, held)

        self.app.push_screen(EndConfirm(campaign, held, error), confirmed)

    def send_end(self, campaign: str, typed: str, held: Iterable[Holding] = ()) -> None:
        self.app.notify(f"ending {campaign}: destroying everything it holds…", timeout=10)
        fut = self.engine.submit(EndIntent(destroy=True, typed=typed))
        listed = tuple(held)

        def done(f: concurrent.futures.Future[Any]) -> None:
            exc = f.exception()
            reply: Reply | None = None if exc is not None else f.result()
            if reply is not None and reply.done:
                text = clean(f"ended {campaign}: {reply.message}", 600)
                rest = left_after_end(listed, reply.destroyed)
                if rest:
                    self.on_ui(self._destroy_rest, campaign, rest)
            else:
                why = exc if reply is None else reply.message
                text = clean(f"could not end {campaign}: {why}", 300)
            self.tell(text, "error" if reply is None or not reply.done else "information", 30)

        fut.add_done_callback(done)

    def _destroy_rest(self, campaign: str, rest: tuple[int, ...]) -> None:
        """What the dialog listed and the end left (a controller from before the engine's
        end went over stopped rentals too: they went on billing storage, "ended demo: it
        held nothing"). The person typed the name over that list: each is destroyed, as the
        person's act."""
        for iid in rest:
            self.send(
                f"destroyed {iid} ({campaign} ended)",
                DestroyIntent(
                    DestroyConfirmation(iid, str(iid)),
                    f"the end of {campaign}: everything it held destroyed, its name typed",
                ),
                f"could not destroy {iid}",
            )
