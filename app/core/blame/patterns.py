"""Known-fatal boot status texts: a match abandons the attempt at once.

Vast's status line also carries the image's build output, where "Failed" or "Error" is ordinary
(`W: Failed to fetch ...`), so a pattern names a failure of the pull or the container start, and
a line that reads as build output is never fatal (`BENIGN`)."""

from __future__ import annotations

import re

# Texts seen on real hosts (VAST_API.md "status_msg texts seen in the wild"). The official
# CLI's self-test (vastai `cli/commands/machines.py`, self-test) flags any line containing
# error / failed / failure / exception / traceback / oci runtime / permission denied; we keep
# its specific words but anchor the generic ones to where a daemon or runtime puts them (the
# start of the line), so build output that merely mentions a failure passes.
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
    r"^error\b",  # "Error response from daemon: ...", "Error: container failed to start"
    r"^(fatal|panic)\b",
    r"^failed to\b",
    r"traceback \(most recent call last\)",
    r"permission denied",
)

# Build output: apt's warnings (`W:`/`N:` lines), Docker build steps and their numbered
# BuildKit lines, pip and npm notices, and advisories such as "Error-prone package".
BENIGN_PATTERNS: tuple[str, ...] = (
    r"^\s*[WN]:\s",
    r"^\s*(step \d+/\d+|#\d+\s)",
    r"^\s*(npm )?(warn|warning|notice|info)\b",
    r"\berror-prone\b",
    r"^\s*(get|hit|ign|fetched):?\s",
)


def compile_patterns(patterns: tuple[str, ...] | list[str]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.IGNORECASE) for p in patterns)


DEFAULT_FATAL = compile_patterns(DEFAULT_FATAL_PATTERNS)
BENIGN = compile_patterns(BENIGN_PATTERNS)


def fatal_match(
    status_msg: str | None, patterns: tuple[re.Pattern[str], ...] = DEFAULT_FATAL
) -> str | None:
    """The first fatal pattern the status line matches; None, always, for build output."""
    if not status_msg:
        return None
    line = status_msg.strip()
    if any(b.search(line) for b in BENIGN):
        return None
    for p in patterns:
        if p.search(line):
            return p.pattern
    return None
