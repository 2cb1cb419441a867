"""Shipping probes to hosts and reading what comes back, defensively."""

from __future__ import annotations

import json
import secrets
import shlex
from importlib import resources
from typing import Any

from ...core.errors import RentwatchError
from ...core.preflight.verdict import CheckPolicy
from ...core.text import clean

# A public endpoint that serves N bytes of nothing in particular, for the download check
# (Cloudflare's speed test). Used only when the campaign's check policy enables it.
NET_PROBE_URL = "https://speed.cloudflare.com/__down?bytes=50000000"

MAX_PROBE_OUTPUT = 256 * 1024
# A probe's document is a few levels deep; a host's can be anything. Deeper than this, or an
# integer longer than this many digits, is no document of ours: nesting can exhaust the
# recursion limit of whatever walks it next (json.loads itself raises RecursionError on 60,000
# `[`), and a long integer makes float() and math.isfinite() raise OverflowError (over 4,300
# digits json.loads raises a plain ValueError, no JSONDecodeError).
MAX_DOC_DEPTH = 32
MAX_INT_DIGITS = 20


class ProbeError(RentwatchError):
    """A probe's output could not be trusted: garbage, too big, not JSON, wrong schema, a hang."""

    title = "probe failed"


def probe_source(name: str) -> bytes:
    return resources.files("rentwatch.probes").joinpath(f"{name}.py").read_bytes()


def _host_int(digits: str) -> int | float:
    """An integer from a host's JSON; one too long for any figure of ours reads as a float
    (infinite past 308 digits), which every reader already treats as no number."""
    return int(digits) if len(digits.lstrip("-")) <= MAX_INT_DIGITS else float(digits)


def _depth(doc: Any) -> int:
    """How deeply `doc` nests lists and objects, walked without recursion."""
    deepest, todo = 0, [(doc, 1)]
    while todo:
        node, level = todo.pop()
        if isinstance(node, dict | list):
            deepest = max(deepest, level)
            if deepest > MAX_DOC_DEPTH:
                break
            kids = node.values() if isinstance(node, dict) else node
            todo.extend((kid, level + 1) for kid in kids)
    return deepest


def load_host_json(text: str) -> Any:
    """One JSON value from a host, or ValueError for anything that is not a document we read:
    not JSON, nested past MAX_DOC_DEPTH, or breaking the decoder in any way."""
    try:
        doc = json.loads(text, parse_int=_host_int)
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"not JSON ({type(exc).__name__})") from None
    if _depth(doc) > MAX_DOC_DEPTH:
        raise ValueError(f"nested deeper than {MAX_DOC_DEPTH}")
    return doc


def failure_text(exc: BaseException) -> str:
    """An exception as a reason may say it: its type and its text, cut short and printable."""
    try:
        said = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose own text fails still has a type
        said = ""
    return f"{type(exc).__name__}: {clean(said, 200)}"


def bounded(value: Any, limit: int = 4000) -> Any:
    """A piece of a host's document as a ledger event may hold it: itself when its JSON is
    short, else that JSON cut to `limit` characters (a host chooses how long its text is)."""
    try:
        text = json.dumps(value, default=str)
    except (ValueError, RecursionError):
        return "<unreadable>"
    return value if len(text) <= limit else text[:limit]


def parse_probe_output(raw: bytes, probe: str, truncated: bool = False) -> dict[str, Any]:
    """The probe's JSON document (its last non-empty line), validated; ProbeError otherwise."""
    if truncated or len(raw) > MAX_PROBE_OUTPUT:
        raise ProbeError(f"{probe} printed more than {MAX_PROBE_OUTPUT // 1024} KiB: cut off")
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        raise ProbeError(f"{probe} printed nothing")
    last = text.splitlines()[-1]
    try:
        doc = load_host_json(last)
    except ValueError as exc:
        raise ProbeError(f"{probe} did not print JSON ({exc}): {clean(last, 80)!r}") from None
    if (
        not isinstance(doc, dict)
        or doc.get("probe") != probe
        or type(doc.get("schema")) is not int
        or doc.get("schema") != 1
    ):
        raise ProbeError(f"{probe} printed JSON of the wrong shape")
    return doc


def new_nonce() -> int:
    """A fresh nonce for one preflight run (core/proof): unguessable, never 0."""
    return secrets.randbelow(2**31 - 1) + 1


def preflight_command(
    checks: CheckPolicy, net_url: str | None = None, nonce: int | None = None
) -> str:
    """The command line the preflight runs under (its script comes on stdin): checks the policy
    turns off are skipped on the host; `nonce` picks the entries it reports."""
    args = ["python3", "-"]
    if nonce is not None:
        args += ["--nonce", str(nonce)]
    if not checks.pcie:
        args += ["--pcie-mb", "0"]
    if not checks.vram:
        args.append("--no-vram")
    if not checks.disk:
        args += ["--disk-mb", "-1"]
    if checks.net and net_url:
        args += ["--net-url", net_url]
    return shlex.join(args)


# the NVML sampler's command line: XID events waiting now and those the watchdog logged
SAMPLER_COMMAND = "python3 - --events-ms 0 --xid-log ~/.rentwatch/xid.jsonl"


# where the watchdog finds the container's variables when its SSH session lacks them (every
# image but Vast's own): the file the create's onstart recipe writes, then PID 1's environment
WATCHDOG_ENV_FILES = "--env-file /etc/environment --env-file /proc/1/environ"


# whether the watchdog runs (its pid file, signal 0)
WATCHDOG_RUNS = (
    "[ -f ~/.rentwatch/watchdog.pid ] && kill -0 $(cat ~/.rentwatch/watchdog.pid) 2>/dev/null"
)
# the heartbeat, and whether the watchdog it feeds still runs
HEARTBEAT = (
    f"touch ~/.rentwatch/heartbeat && {{ {WATCHDOG_RUNS} && echo WATCHDOG alive"
    " || echo WATCHDOG gone; }"
)


def watchdog_command(window_s: float, scale: float) -> str:
    """Install the watchdog (its script on stdin) and start it unless one already runs."""
    return (
        "mkdir -p ~/.rentwatch && cat > ~/.rentwatch/watchdog.py"
        f" && touch ~/.rentwatch/heartbeat && {{ {WATCHDOG_RUNS}"
        " || (setsid nohup python3 ~/.rentwatch/watchdog.py"
        f" --window-s {window_s:g} --scale {scale:g} {WATCHDOG_ENV_FILES}"
        " >/dev/null 2>&1 </dev/null & echo $! > ~/.rentwatch/watchdog.pid); }"
    )


def probe_run_text(stdout: bytes, stderr: bytes) -> str | None:
    """Why a probe run could not run: the shell's stderr and the probe's own error; None when it
    computed. Host-controlled: only matched, never shown unescaped."""
    text = stderr[-2000:].decode("utf-8", errors="replace")
    lines = stdout.decode("utf-8", errors="replace").strip().splitlines()
    if lines:
        try:
            doc = load_host_json(lines[-1][:MAX_PROBE_OUTPUT])
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("ok") is True:
            return None
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            text += f"\n{str(err.get('type'))[:80]}: {str(err.get('message'))[:300]}"
    return text
