"""What text shown to a person may not hold, checked apart from `core.text.clean` so a test of its
output does not trust it: C0 and C1 controls, DEL, line breaks, bidi controls and invisible marks."""

from __future__ import annotations

import re

_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


def is_clean(text: str) -> bool:
    return _UNSAFE.search(text) is None
