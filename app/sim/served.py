"""The base URLs of the simulated markets this process serves, kept apart from the server so
that asking imports nothing of the simulator."""

from __future__ import annotations

_SERVED: set[str] = set()


def add(url: str) -> None:
    _SERVED.add(url.rstrip("/"))


def discard(url: str) -> None:
    _SERVED.discard(url.rstrip("/"))


def served_here(url: str) -> bool:
    return url.rstrip("/") in _SERVED
