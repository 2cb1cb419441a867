"""Host-controlled text made safe to show: control characters and escape sequences removed,
length capped. Rendering then treats it as plain text, never as markup."""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)?|\x1b[@-Z\\-_]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean(text: object, limit: int = 200) -> str:
    """One line of host text: escapes stripped, controls dropped, newlines as spaces, capped."""
    s = "" if text is None else str(text)
    s = _ANSI.sub("", s)
    s = s.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    s = _CONTROL.sub("", s)
    if len(s) > limit:
        s = s[: limit - 1] + "…"
    return s
