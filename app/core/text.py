"""Host- and market-controlled text made safe to show: the one function every output path uses.

Removes every 7- and 8-bit escape sequence with its payload (OSC 52, title changes, screen
clears, DCS/APC), every other C0/C1 control and DEL, and the Unicode format characters that
reorder or hide text. References: ECMA-48 (5, 8.3), Unicode TR#9, "Trojan Source"
(CVE-2021-42574)."""

from __future__ import annotations

import re

# ESC-introduced: CSI (ESC [ params intermediates final); OSC, DCS, SOS, PM, APC strings up to
# BEL or ST (or the end: an unterminated string swallows the rest, as a terminal would); any
# other two- or three-byte escape (ESC, optional intermediates, a final byte).
_SEQUENCES = re.compile(
    r"""
      \x1b\[[0-?]*[ -/]*[@-~]?                    # CSI
    | \x9b[0-?]*[ -/]*[@-~]?                      # 8-bit CSI
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])     # OSC, DCS, SOS, PM, APC (7- and 8-bit)
      [^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?       #   their payload, up to BEL or ST
    | \x1b[ -/]*[0-~]?                            # any other escape
    """,
    re.VERBOSE,
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# bidi controls, invisible marks and joiners, BOM: they reorder or hide what is shown
_INVISIBLE = re.compile(r"[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_BREAKS = re.compile(r"[\r\n\t\v\f\u0085\u2028\u2029]")


def clean(text: object, limit: int = 200) -> str:
    """One line of untrusted text: escapes and controls out, breaks as spaces, capped at `limit`."""
    s = "" if text is None else str(text)
    s = _SEQUENCES.sub("", s)
    s = _BREAKS.sub(" ", s)
    s = _CONTROL.sub("", s)
    s = _INVISIBLE.sub("", s)
    if len(s) > limit:
        s = s[: max(0, limit - 1)] + "…"
    return s
