"""The pieces the notices' wording writes its sentences with: a host- or market-controlled value
made fit to quote (`safe`), counts, durations, caps and redaction. Pure."""

from __future__ import annotations

import re
from typing import Final

from ..core.text import clean

FIELD_LIMIT: Final = 160  # one host- or market-controlled value inside a sentence
REDACTED: Final = "[redacted]"

_ELLIPSIS = "…"
_SPACES = re.compile(r"\s+")


def safe(value: object, limit: int = FIELD_LIMIT) -> str:
    """One untrusted value inside a sentence: cleaned, spaces collapsed, capped."""
    return _SPACES.sub(" ", clean(value, limit=limit)).strip()


def plural(n: int, word: str) -> str:
    """`1 instance`, `2 instances`, `0 instances`."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def released(stopped: int, destroyed: int) -> str:
    """What an end did to the rentals it held ("Stopped 1 instance and destroyed 1 ...")."""
    done = [
        f"{verb} {plural(n, 'instance')}"
        for verb, n in (("stopped", stopped), ("destroyed", destroyed))
        if n
    ]
    if not done:
        return "Stopped nothing: none of its instances was still running."
    said = " and ".join(done)
    return f"{said[0].upper()}{said[1:]} it still held."


def duration(seconds: float) -> str:
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return text


def cap(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + _ELLIPSIS
