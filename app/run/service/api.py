"""The service's wire shapes, as JSON, imported by both sides so a rename reaches both at once.
Nothing in it touches the engine."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
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


# -- intents: the engine's own (app/engine/intents.py), on the wire by name with the fields each
# carries (a destroy's confirmation as its two fields; the reason is the controller's)
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


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str):
        raise BadRequest(f"{name!r} must be the text the operator typed to confirm")
    return value[:100]


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if not isinstance(value, bool):
        raise BadRequest(f"{name!r} must be true or false")
    return value


# each wire field's check; a field the body leaves out takes the intent's default, if it has one
FIELDS: dict[str, Callable[[dict[str, Any], str], Any]] = {
    "instance_id": lambda body, name: int_field(body, name, 1),
    "size": lambda body, name: int_field(body, name, 0, 1000),
    "typed": _text,
    "destroy": _flag,
}


def intent_to_json(intent: Intent) -> dict[str, Any]:
    name = _NAMES[type(intent)]
    carrier = intent.confirmation if isinstance(intent, DestroyIntent) else intent
    return {"intent": name, **{f: getattr(carrier, f) for f in WIRE[name][1]}}


def intent_from_json(body: Any) -> Intent:
    """Parse one intent; BadRequest names the first problem. Unknown keys are refused, so a
    typo ("instnace_id") is an error rather than an intent on the wrong target."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    name = body.get("intent")
    if not isinstance(name, str) or name not in INTENTS:  # a list or an object: no hash
        raise BadRequest(f"unknown intent {str(name)[:40]!r}; known: {', '.join(sorted(INTENTS))}")
    cls, names = WIRE[name]
    extra = set(body) - {"intent", *names}
    if extra:
        raise BadRequest(f"unknown fields for {name}: {', '.join(sorted(map(str, extra)))[:200]}")
    optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
    given = {f: FIELDS[f](body, f) for f in names if f in body or f not in optional}
    if cls is DestroyIntent:
        return DestroyIntent(DestroyConfirmation(**given))
    return cls(**given)  # type: ignore[no-any-return]


# -- replies: the engine's `Reply`, field for field ------------------------------------------
def reply_to_json(reply: Reply) -> dict[str, Any]:
    return dataclasses.asdict(reply)


def reply_from_json(body: Any) -> Reply:
    """A reply as the controller sent it; ServiceError where it is not one."""
    try:
        lists = {k: tuple(body.get(k, ())) for k in ("acted_on", "destroyed", "lines")}
        return record(Reply, body, **lists)
    except (AttributeError, TypeError) as exc:
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
