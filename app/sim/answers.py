"""How the simulated marketplace answers: Vast's error shape, JSON and text answers, a refusal
raised from inside a handler, sorting and page tokens, shared by the route modules."""

from __future__ import annotations

import base64
import functools
import json
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, TypeVar

from aiohttp import web

if TYPE_CHECKING:
    from .clock import SimClock
    from .market import SimMarket
    from .rental import SimInstance

# the market moment a call arrived at, stamped on its answer (`X-Market-Time`): set per call by
# the API's middleware, in the call's own task
MARKET_NOW: ContextVar[float | None] = ContextVar("market_now", default=None)


def call_now(clock: SimClock) -> float:
    """The moment the call in hand arrived at: what it does takes effect then, as one call to
    the real service does, however long a loaded box kept its handler waiting."""
    now = MARKET_NOW.get()
    return clock.now() if now is None else now


MAX_BODY = 4 * 1024 * 1024  # the largest request body the market reads
SCOPED = web.RequestKey("scoped", int)  # the instance whose own (container) key made the call


def answer(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=json.dumps(data).encode(), status=status, content_type="application/json"
    )


def text(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/plain")


def error(status: int, code: str, msg: str, **extra: Any) -> web.Response:
    """Vast's general error shape (vast-ai/docs `api-reference/rate-limits-and-errors.mdx`):
    `{"success": false, "error": <code>, "msg": <text>}`."""
    return answer({"success": False, "error": code, "msg": msg, **extra}, status)


class Refused(Exception):
    """A call refused from inside its handler: the API answers with `response`."""

    def __init__(self, response: web.Response) -> None:
        super().__init__(response.status)
        self.response = response


def live(
    market: SimMarket, request: web.Request, msg: str = "Instance does not exist"
) -> SimInstance:
    """The live instance the path's `{iid}` names; else the call is refused with a 404."""
    inst = market.live(int(request.match_info["iid"]))
    if inst is None:
        raise Refused(error(404, "no_such_instance", msg))
    return inst


async def body_json(request: web.Request) -> Any:
    """The request's JSON body ({} when empty); a body that is not JSON raises ValueError."""
    raw = await request.read()
    return json.loads(raw) if raw else {}


async def public_key(request: web.Request) -> str:
    """The OpenSSH public key a call's body gives (`ssh_key`); else the call is refused."""
    key = str((await body_json(request)).get("ssh_key", "")).strip()
    if not key.startswith(("ssh-", "ecdsa-")):
        raise Refused(error(400, "invalid_args", "not an OpenSSH public key"))
    return key


def query_of(request: web.Request) -> dict[str, str]:
    """The query string, the last value of a repeated name winning."""
    return {k: request.query.getall(k)[-1] for k in request.query}


def _value(row: dict[str, Any], col: str) -> tuple[bool, Any]:
    value = row.get(col)
    return (value is None, value if isinstance(value, int | float | str) else 0)


def ordered(rows: list[dict[str, Any]], by: list[Any]) -> list[dict[str, Any]]:
    """`rows` sorted by each (column, "asc" or "desc") of `by`, the first the most significant."""
    for col, direction in reversed(by):
        rows.sort(
            key=functools.partial(_value, col=str(col)), reverse=str(direction).lower() == "desc"
        )
    return rows


T = TypeVar("T")


def token_of(n: int) -> str:
    return base64.urlsafe_b64encode(str(n).encode()).decode()


def token_at(token: str | None) -> int:
    """What a page token names, an offset or the last id sent (0 without one); a token that
    names none is refused."""
    try:
        n = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
    except (ValueError, UnicodeDecodeError):
        n = -1
    if n < 0:
        raise Refused(error(400, "invalid_args", "bad after_token"))
    return n


def page_of(rows: list[T], token: str | None, limit: int) -> tuple[list[T], str | None]:
    """The page of `rows` a page token starts and the next page's token (None: the last page)."""
    start = token_at(token)
    nxt = start + limit
    return rows[start:nxt], token_of(nxt) if nxt < len(rows) else None
