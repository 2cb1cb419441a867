"""Which controller the operator means, and where it listens: a `Target` found by `resolve` from a
socket, a URL, or a campaign and/or pid among the controllers running here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from . import api, registry


@dataclass(frozen=True)
class Target:
    socket: str | None = None
    url: str | None = None
    token: str | None = None

    def describe(self) -> str:
        return f"unix:{self.socket}" if self.socket else str(self.url)

    def httpx_args(self, asynchronous: bool) -> dict[str, Any]:
        headers = {api.TOKEN_HEADER: f"Bearer {self.token}"} if self.token else {}
        args: dict[str, Any] = {"base_url": str(self.url), "headers": headers}
        if self.socket:
            kind = httpx.AsyncHTTPTransport if asynchronous else httpx.HTTPTransport
            args.update(base_url="http://rentwatch", transport=kind(uds=self.socket))
        return args


def read_token(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError as exc:
        raise api.ServiceError(f"cannot read the token file {path}: {exc.strerror}") from None


def resolve(
    socket: str | None = None,
    campaign: str | None = None,
    url: str | None = None,
    token_file: str | None = None,
    pid: int | None = None,
) -> Target:
    """The controller the operator means: by socket, by URL, by campaign and/or pid (two
    controllers may run campaigns of one name), or the only one."""
    if url:
        return Target(url=url, token=read_token(token_file) if token_file else None)
    if socket:
        return Target(socket=socket)
    found = registry.find(campaign=campaign, pid=pid)
    if len(found) == 1:
        return Target(socket=found[0].socket)
    if not found:
        named = [f"for campaign {campaign!r}"] if campaign else []
        named += [f"with pid {pid}"] if pid else []
        what = " ".join(named) or "running"
        raise api.ControllerGone(f"no controller {what} (see `rentwatch ls`)")
    names = ", ".join(f"{e.campaign} (pid {e.pid})" for e in found)
    raise api.ServiceError(
        f"{len(found)} controllers are running ({names}): name one with --pid, --socket "
        "or --campaign"
    )
