"""A small HTTP/1.1 server on asyncio streams: enough for the marketplace API, with keep-alive.

The simulator has no web framework among its dependencies; this keeps the protocol handling in
one place (request parsing, size limits, keep-alive) so the API module only sees requests.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

MAX_BODY = 4 * 1024 * 1024
MAX_HEADER_LINES = 100

REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        if not self.body:
            return {}
        return json.loads(self.body)


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    stall: float = 0.0  # seconds to wait before answering (fault injection)
    close: bool = False

    @classmethod
    def of(cls, data: Any, status: int = 200) -> Response:
        return cls(status=status, body=json.dumps(data).encode())

    @classmethod
    def text(cls, text: str, status: int = 200) -> Response:
        return cls(status=status, body=text.encode(), content_type="text/plain; charset=utf-8")


Handler = Callable[[Request], Awaitable[Response]]


async def _read_request(reader: asyncio.StreamReader) -> Request | None:
    line = await reader.readline()
    if not line:
        return None
    try:
        method, target, _version = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
    except ValueError:
        raise ValueError("malformed request line") from None
    headers: dict[str, str] = {}
    for _ in range(MAX_HEADER_LINES):
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        name, _, value = h.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0") or 0)
    if length > MAX_BODY:
        raise ValueError("body too large")
    body = await reader.readexactly(length) if length else b""
    parts = urlsplit(target)
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    return Request(method.upper(), parts.path, query, headers, body)


def _encode(resp: Response, keep_alive: bool) -> bytes:
    head = [
        f"HTTP/1.1 {resp.status} {REASONS.get(resp.status, 'Status')}",
        f"Content-Type: {resp.content_type}",
        f"Content-Length: {len(resp.body)}",
        f"Connection: {'keep-alive' if keep_alive else 'close'}",
    ]
    head += [f"{k}: {v}" for k, v in resp.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + resp.body


async def serve(handler: Handler, host: str, port: int) -> asyncio.Server:
    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    req = await _read_request(reader)
                except (ValueError, asyncio.IncompleteReadError):
                    writer.write(
                        _encode(
                            Response.of(
                                {
                                    "success": False,
                                    "error": "bad_request",
                                    "msg": "malformed HTTP request",
                                },
                                400,
                            ),
                            False,
                        )
                    )
                    break
                if req is None:
                    break
                resp = await handler(req)
                if resp.stall:
                    await asyncio.sleep(resp.stall)
                keep = req.headers.get("connection", "").lower() != "close" and not resp.close
                writer.write(_encode(resp, keep))
                await writer.drain()
                if not keep:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    return await asyncio.start_server(on_conn, host, port)
