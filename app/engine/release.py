"""The one rule that lets go of rentals, at a campaign's end or a person's: a proven rental is
stopped, unless `keep_proven` is off, when it is destroyed through the operator's confirmed
destroy; anything never proven is given up as cancelled and destroyed."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..core.lifecycle import Phase
from .intents import AutomationRefused, DestroyConfirmation, DestroyIntent, Reply
from .updates import GaveUp

if TYPE_CHECKING:
    from .attempt import Attempt
    from .supervisor import Supervisor


def proven(a: Attempt) -> bool:
    """The keep test: it passed its preflight, or was trusted as verified."""
    return a.passed_preflight or a.life.phase == Phase.VERIFIED


async def release(
    sup: Supervisor, rentals: Iterable[Attempt], actor: str, reason: str, keep_proven: bool
) -> list[Reply]:
    """Let go of each of `rentals` by the rule above; a reply each, its message the line
    said of it. One failure is said and does not keep the rest billing."""
    done: list[Reply] = []
    for a in list(rentals):
        try:
            done.append(await _release_one(sup, a, actor, reason, keep_proven))
        except AutomationRefused as exc:
            done.append(Reply.refusal(f"i:{a.instance_id}: {exc}"))
        except Exception as exc:
            sup.journal.say(f"release FAILED i:{a.instance_id}: {exc!r}")
            done.append(Reply(False, f"i:{a.instance_id} FAILED: {exc}"))
    return done


async def _release_one(
    sup: Supervisor, a: Attempt, actor: str, reason: str, keep_proven: bool
) -> Reply:
    iid = a.instance_id
    keep = proven(a) and a.life.phase != Phase.ABANDONED  # one given up is let go of
    if keep and not keep_proven:
        # the door's checks hold here (a rental of the fleet; AFTER_END takes a destroy)
        got = await sup.operator.apply(DestroyIntent(DestroyConfirmation(iid, str(iid)), reason))
        return Reply.of(
            got.done, iid, f"destroyed verified i:{iid}", f"destroy of i:{iid} FAILED", True
        )
    if keep:
        paused = a.life.phase == Phase.STOPPED and a.resumes_by_itself
        if a.life.phase == Phase.STOPPED and not paused:
            return Reply(True, f"i:{iid} was stopped already (storage bills until it is destroyed)")
        # a bid rental the market paused (outbid) resumes by itself: only our stop ends it
        ok = await sup.actions.stop(a, actor, reason)
        what = " (the market had paused it: our stop ends the bid)" if paused else ""
        return Reply.of(ok, iid, f"stopped verified i:{iid}{what}", f"stop of i:{iid} FAILED")
    if a.life.phase != Phase.ABANDONED:
        if a.preflight_task:
            a.preflight_task.cancel()
        sup.journal.writer.emit(GaveUp(a, sup.now(), actor, reason, "cancelled"))
    ok = await sup.actions.destroy(a, actor, reason)
    if ok:
        sup.journal.say(f"destroy i:{iid} m:{a.machine_id} by {actor}: {reason} (never proven)")
    return Reply.of(
        ok, iid, f"destroyed unverified i:{iid}", f"destroy of i:{iid} FAILED", destroyed=True
    )
