"""The service's wire shapes, as JSON, imported by both sides so a rename reaches both at once.
Nothing in it touches the engine."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ...core.errors import RentwatchError
from ...core.records import record
from ...engine.intents import (
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
from ...ledger.readonly import QueryResult
from ...views.snapshot import FleetReadout, InstanceSnap

API_VERSION = 1
MAX_BODY_BYTES = 64 * 1024  # an intent or a query is a few hundred bytes; refuse more, early
MAX_QUERY_ROWS = 10_000  # one page at most; page on with `offset`
TOKEN_HEADER = "Authorization"


class ServiceError(RentwatchError):
    """The controller answered with an error, or could not be reached."""

    title = "controller"


class NotReady(ServiceError):
    title = "not ready"


class NotHeld(ServiceError):
    title = "not held"


class Refused(ServiceError):
    title = "refused"


class ControllerGone(ServiceError):
    title = "controller unreachable"


class AlreadyServed(OSError):
    """Another live controller answers on this socket (it holds this ledger)."""


# -- intents: the engine's own (app/engine/intents.py), on the wire by name, with the fields each
# carries (a destroy's confirmation travels as its two fields; the reason is the controller's)
WIRE: dict[str, tuple[type[Any], tuple[str, ...]]] = {
    "stop": (StopIntent, ("instance_id",)),
    "start": (StartIntent, ("instance_id",)),
    "destroy": (DestroyIntent, ("instance_id", "typed")),
    "create": (CreateIntent, ()),
    "fleet": (FleetSizeIntent, ("size",)),
    "handover": (HandOverIntent, ("instance_id",)),
    "end": (EndIntent, ("destroy", "typed")),
}
INTENTS = {name: cls for name, (cls, _) in WIRE.items()}
_NAMES = {cls: name for name, cls in INTENTS.items()}


class BadRequest(ValueError):
    """A request the controller will not act on; the message says what was wrong."""


MAX_BODY_DEPTH = 16  # an intent or a query is one flat object


def parse_body(raw: bytes) -> Any:
    """A request body as JSON, or BadRequest for anything else: not UTF-8 or JSON, numbers the
    decoder refuses, or nesting past MAX_BODY_DEPTH (60,000 `[` fit under the size cap, and what
    reads it next must not recurse either)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadRequest(f"the body is not valid JSON: {type(exc).__name__}: {exc}"[:300]) from None
    todo: list[tuple[Any, int]] = [(body, 1)]
    while todo:
        node, depth = todo.pop()
        if isinstance(node, dict | list):
            if depth > MAX_BODY_DEPTH:
                raise BadRequest(f"the body nests deeper than {MAX_BODY_DEPTH} levels")
            todo.extend(
                (kid, depth + 1) for kid in (node.values() if isinstance(node, dict) else node)
            )
    return body


def int_field(body: dict[str, Any], name: str, low: int = 0, high: int = 2**53) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(f"{name!r} must be an integer")
    if not low <= value <= high:
        raise BadRequest(f"{name!r} must be between {low} and {high}")
    return value


def intent_to_json(intent: Intent) -> dict[str, Any]:
    name = _NAMES[type(intent)]
    if isinstance(intent, DestroyIntent):
        return {
            "intent": name,
            "instance_id": intent.instance_id,
            "typed": intent.confirmation.typed,
        }
    return {"intent": name, **{f: getattr(intent, f) for f in WIRE[name][1]}}


def intent_from_json(body: Any) -> Intent:
    """Parse one intent; BadRequest names the first problem. Unknown keys are refused, so a
    typo ("instnace_id") is an error rather than an intent on the wrong target."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    name = body.get("intent")
    if not isinstance(name, str) or name not in INTENTS:  # a list or an object: no hash
        raise BadRequest(f"unknown intent {str(name)[:40]!r}; known: {', '.join(sorted(INTENTS))}")
    extra = set(body) - {"intent", *WIRE[name][1]}
    if extra:
        raise BadRequest(f"unknown fields for {name}: {', '.join(sorted(map(str, extra)))[:200]}")
    match name:
        case "create":
            return CreateIntent()
        case "fleet":
            return FleetSizeIntent(int_field(body, "size", 0, 1000))
        case "end":
            destroy, typed = body.get("destroy", False), body.get("typed", "")
            if not isinstance(destroy, bool) or not isinstance(typed, str):
                raise BadRequest("'destroy' must be true or false, 'typed' the text typed")
            return EndIntent(destroy, typed[:100])
    iid = int_field(body, "instance_id", 1)
    if name == "destroy":
        typed = body.get("typed")
        if not isinstance(typed, str):
            raise BadRequest("'typed' must be the text the operator typed to confirm")
        return DestroyIntent(DestroyConfirmation(iid, typed[:100]))
    return INTENTS[name](iid)  # type: ignore[no-any-return]


# -- replies: the engine's `Reply`, field for field ------------------------------------------
def reply_to_json(reply: Reply) -> dict[str, Any]:
    return dataclasses.asdict(reply)


def reply_from_json(body: Any) -> Reply:
    """A reply as the controller sent it; ServiceError where it is not one."""
    try:
        if not isinstance(body, dict):
            raise TypeError("not an object")
        ids = {k: tuple(int(i) for i in body.get(k, ())) for k in ("acted_on", "destroyed")}
        refused = body.get("refused")
        return Reply(
            done=bool(body["done"]),
            message=str(body["message"]),
            refused=None if refused is None else str(refused),
            not_held=bool(body.get("not_held", False)),
            lines=tuple(str(line) for line in body.get("lines", ())),
            **ids,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ServiceError(f"the controller's reply is not one: {exc}") from None


# -- snapshots ------------------------------------------------------------------------------
_SNAP_FIELDS = tuple(f.name for f in dataclasses.fields(FleetReadout))
_INST_FIELDS = tuple(f.name for f in dataclasses.fields(InstanceSnap))


def snap_to_json(snap: FleetReadout) -> dict[str, Any]:
    """As `dataclasses.asdict`, without its deep copies: five times faster at 1,000 instances,
    which is most of what a snapshot costs the controller per poll."""
    out = {name: getattr(snap, name) for name in _SNAP_FIELDS}
    out["instances"] = [{name: getattr(i, name) for name in _INST_FIELDS} for i in snap.instances]
    out["decisions"] = list(snap.decisions)
    return out


def snap_from_json(data: dict[str, Any]) -> FleetReadout:
    instances = tuple(
        record(InstanceSnap, i, util_history=tuple(i.get("util_history") or ()))
        for i in data.get("instances", ())
    )
    return record(
        FleetReadout, data, instances=instances, decisions=tuple(data.get("decisions", ()))
    )


# -- query results --------------------------------------------------------------------------
def _cell(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    return str(v)  # timestamps, decimals, lists: as `rentwatch ledger --json` prints them


def result_to_json(result: QueryResult, offset: int = 0) -> dict[str, Any]:
    return {
        "columns": list(result.columns),
        "rows": [[_cell(v) for v in row] for row in result.rows],
        "truncated": result.truncated,
        "offset": offset,
    }


def result_from_json(data: dict[str, Any]) -> QueryResult:
    return QueryResult(
        [str(c) for c in data["columns"]],
        [tuple(r) for r in data["rows"]],
        bool(data["truncated"]),
    )


def error_body(kind: str, message: str, title: str | None = None) -> dict[str, Any]:
    return {"error": {"type": kind, "title": title or kind.replace("_", " "), "message": message}}


def sse_event(event: str, data: Any) -> bytes:
    """One server-sent event; JSON has no raw newlines, so it fits one `data:` line."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
