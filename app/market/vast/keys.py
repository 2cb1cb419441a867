"""Where the Vast API key comes from: an argument, `VAST_API_KEY`, or the official CLI's key file
(vastai 1.9.1 `vast.py`: `$XDG_CONFIG_HOME/vastai/vast_api_key`, then `~/.vast_api_key`)."""

from __future__ import annotations

import os
from pathlib import Path

from ...core.errors import RentwatchError


class NoApiKey(RentwatchError):
    title = "no API key"


def find_api_key(explicit: str | None = None, flag: str | None = "--api-key") -> str:
    """The key from an argument, VAST_API_KEY, or the official CLI's key file, in that order.
    `flag`: the command's option for it, named in the error (None: the command has none)."""
    if explicit:
        return explicit.strip()
    env = os.environ.get("VAST_API_KEY")
    if env:
        return env.strip()
    config = os.environ.get("XDG_CONFIG_HOME") or "~/.config"
    # the official CLI's key files, newest location first (XDG, then the legacy file)
    for path in (Path(config) / "vastai" / "vast_api_key", Path("~/.vast_api_key")):
        try:
            text = path.expanduser().read_text().strip()
        except OSError:
            continue
        if text:
            return text
    raise NoApiKey(
        "set VAST_API_KEY"
        + (f", pass {flag}," if flag else "")
        + " or log in with the official CLI "
        "(vastai set api-key ...), which writes ~/.config/vastai/vast_api_key"
    )
