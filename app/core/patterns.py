"""Known-fatal boot status texts: a match abandons the attempt at once."""

from __future__ import annotations

import re

# Texts seen on real hosts (see VAST_API.md) and the official CLI's self-test list.
DEFAULT_FATAL_PATTERNS: tuple[str, ...] = (
    r"manifest for .* not found",
    r"pull access denied",
    r"repository does not exist",
    r"unauthorized: authentication required",
    r"oci runtime",
    r"failed to create shim task",
    r"unresolvable cdi devices",
    r"unable to find image",
    r"unexpected fault address",
    r"\berror\b",
    r"\bfailed\b",
    r"\bfailure\b",
    r"\bexception\b",
    r"traceback",
    r"permission denied",
)


def compile_patterns(patterns: tuple[str, ...] | list[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


DEFAULT_FATAL = compile_patterns(DEFAULT_FATAL_PATTERNS)


def fatal_match(
    status_msg: str | None, patterns: tuple[re.Pattern[str], ...] = DEFAULT_FATAL
) -> str | None:
    """The first fatal pattern the status line matches, or None."""
    if not status_msg:
        return None
    for p in patterns:
        if p.search(status_msg):
            return p.pattern
    return None
