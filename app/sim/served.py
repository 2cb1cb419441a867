"""The base URLs of the simulated markets this process serves (the demo's built-in market): such
a market and every rental on it end with the process, so no command reaches them once it has
exited. Kept apart from the server so that asking costs no import of the simulator."""

from __future__ import annotations

_SERVED: set[str] = set()


def add(url: str) -> None:
    _SERVED.add(url.rstrip("/"))


def discard(url: str) -> None:
    _SERVED.discard(url.rstrip("/"))


def served_here(url: str) -> bool:
    """Whether `url` is a simulated market served by this very process."""
    return url.rstrip("/") in _SERVED
