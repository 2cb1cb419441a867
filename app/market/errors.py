"""The market's vocabulary: what any marketplace's calls may raise, and what they return. The
protocol names these; each marketplace's client raises them. `AuthError`: stop, the key was
refused; `AnswerLost`: a request went out and its answer never came back (it may have acted)."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from ..core.errors import MalformedAnswer, RentwatchError


class ApiError(RentwatchError):
    """The marketplace refused a request (4xx) or kept failing (5xx) after retries."""

    title = "marketplace error"

    def __init__(self, status: int, code: str, msg: str) -> None:
        super().__init__(f"{status} {code}: {msg}")
        self.status = status
        self.code = code
        self.msg = msg
        # an instance the refusal still names (a bid under the bid floor: "Vast.ai creates spot
        # instances in the stopped state and returns an error", dstack `vastai/api_client.py`)
        self.named_instance: int | None = None
        self.retry_after = 0.0  # seconds the market asked to wait before another try


class AuthError(ApiError):
    title = "not authorised"


class NotFound(ApiError):
    title = "not found"


class MarketUnavailable(RentwatchError):
    """Timeouts, connection errors or rate limits that outlasted every retry. `network` says
    what the network did when that was the cause ("connection refused"), else None."""

    title = "marketplace unavailable"
    network: str | None = None


def network_cause(exc: BaseException) -> str:
    """What a failed connection met, in a person's words, from the chain of causes under the
    HTTP library's error (httpx wraps the OS error twice: ConnectError <- OSError <- ...)."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedError):
            return "connection refused"
        if isinstance(e, ConnectionResetError):
            return "connection reset"
        if isinstance(e, socket.gaierror):
            return "name not resolved"
        if isinstance(e, TimeoutError):
            return "timed out"
        if isinstance(e, ssl.SSLError):
            return f"TLS: {e.reason or e}"
        todo += [c for c in (e.__cause__, e.__context__) if c is not None]
        todo += [a for a in e.args if isinstance(a, BaseException)]
        todo += list(getattr(e, "exceptions", ()))
    return str(exc).strip() or type(exc).__name__


class AnswerLost(MarketUnavailable):
    """A request went out and no answer came back: the market may have acted on it."""


class QuotaExceeded(ApiError):
    """The daily offer-search quota is spent (429 `search_quota_exceeded`). It resets at UTC
    midnight, so it is not retried, as the official client does not (vastai `api/client.py`)."""

    title = "search quota exceeded"


class AnswerTooLarge(MalformedAnswer):
    """An answer larger than the client's cap: read no further, believe none of it."""


@dataclass(frozen=True)
class Acted:
    """A state change the market confirmed: when it took effect (market time), and whether the
    instance was there to change (a destroy that finds it gone is done all the same)."""

    at: float
    existed: bool = True
    answer_lost: bool = False  # dated to the send of a try whose answer never came


# told of each try of a state change as it goes out: (market time, what became of the last try)
OnTry = Callable[[float, str | None], None]


# what a change (stop, start, destroy) or a create may fail with, short of a refused key
REFUSALS = (ApiError, MarketUnavailable, MalformedAnswer)


@dataclass(frozen=True)
class CreateResult:
    instance_id: int
    label: str
    created_at: float | None = None  # the market's own start_date, when the answer was lost
    # the market made the instance but refused to run it (a bid under the bid floor: created
    # stopped, the error naming it): what it said. The instance exists and bills storage.
    refused: str | None = None
