"""Where the team store is and who this controller is: the URL, the operator's name, the password.
The password never travels on a command line, in the ledger, a log or a notice (a URL carrying
one is refused): it comes from libpq's sources or an owner-only (0600) file."""

from __future__ import annotations

import getpass
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...core.errors import ConfigError

OPERATOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


class TeamConfigError(ConfigError):
    title = "team store"


@dataclass(frozen=True)
class TeamConfig:
    url: str  # a PostgreSQL URL or libpq conninfo, without a password (`parse_url`): shown
    operator: str
    password_file: Path | None = None

    def connect_kwargs(self) -> dict[str, Any]:
        """What `psycopg.connect` needs beside the URL: the password from the operator's file."""
        if self.password_file is None:
            return {}
        return {"password": read_password_file(self.password_file)}


def parse_url(url: str) -> str:
    """The store's URL, checked: PostgreSQL's, and without a password in it."""
    from psycopg.conninfo import conninfo_to_dict

    url = url.strip()
    if not url:
        raise TeamConfigError("the team store's URL is empty")
    if "://" in url and not url.startswith(("postgresql://", "postgres://")):
        raise TeamConfigError("the team store is a PostgreSQL URL (postgresql://USER@HOST/DB)")
    try:
        params = conninfo_to_dict(url)
    except Exception as exc:  # psycopg.ProgrammingError: an unreadable conninfo
        raise TeamConfigError(f"cannot read the team store's URL: {str(exc)[:200]}") from None
    if params.get("password"):
        raise TeamConfigError(
            "the team store's URL carries a password: it would show in the process list and "
            "in logs. Give the URL without it and the password in PGPASSWORD, ~/.pgpass, or "
            "--team-password-file (a file only you can read)"
        )
    return url


def read_password_file(path: Path) -> str:
    """The first line of an owner-only file (0600 or stricter): a file others may read would
    share the team's password with them."""
    try:
        st = path.stat()
    except OSError as exc:
        raise TeamConfigError(f"cannot read the password file {path}: {exc.strerror}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TeamConfigError(
            f"the password file {path} may be read by others (mode "
            f"{stat.S_IMODE(st.st_mode):04o}): chmod 600 {path}"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TeamConfigError(f"cannot read the password file {path}: {exc}") from None
    line = text.splitlines()[0] if text else ""
    if not line:
        raise TeamConfigError(f"the password file {path} is empty")
    return line


def default_operator() -> str:
    try:  # the login name from LOGNAME, USER, LNAME or USERNAME, else the passwd entry
        return getpass.getuser()
    except Exception:  # none (a container without a passwd entry)
        return "operator"


def check_operator(name: str) -> str:
    if not OPERATOR_RE.match(name):
        raise TeamConfigError(
            f"operator name {name[:80]!r}: letters, digits and . _ @ - only (up to 64)"
        )
    return name


def team_section(data: Mapping[str, Any], path: Path | None) -> dict[str, str]:
    """The `[team]` table of the user's config file (url, operator, password_file), checked."""
    where = f"{path}: " if path else ""
    section = data.get("team", {})
    if not isinstance(section, dict):
        raise TeamConfigError(f"{where}[team] must be a table")
    out: dict[str, str] = {}
    for key in ("url", "operator", "password_file"):
        value = section.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise TeamConfigError(f"{where}[team] {key} must be a string")
        out[key] = value
    return out


def resolve(
    url: str | None,
    operator: str | None,
    password_file: str | None,
    section: Mapping[str, str],
) -> TeamConfig | None:
    """The team this run joins: the flags over the config file's `[team]`; None without a URL."""
    url = url or section.get("url")
    if not url:
        if operator or password_file:
            raise TeamConfigError("--operator and --team-password-file need --team URL")
        return None
    name = check_operator(operator or section.get("operator") or default_operator())
    pw = password_file or section.get("password_file")
    pw_path = Path(pw).expanduser() if pw else None
    if pw_path is not None:
        read_password_file(pw_path)  # said now, not on the first sync
    return TeamConfig(parse_url(url), name, pw_path)
