"""Shipping probes to hosts and reading what comes back, defensively."""

from __future__ import annotations

import json
import shlex
from importlib import resources
from typing import Any

from ...core.blame import Blame, Failure, Party, Stage, blame
from ...core.errors import RentwatchError
from ...core.verdict import CheckPolicy

# A public endpoint that serves N bytes of nothing in particular, for the download check
# (Cloudflare's speed test). Used only when the campaign's check policy enables it.
NET_PROBE_URL = "https://speed.cloudflare.com/__down?bytes=50000000"

MAX_PROBE_OUTPUT = 256 * 1024


class ProbeError(RentwatchError):
    """A probe's output could not be trusted: garbage, too big, not JSON, wrong schema, a hang."""

    title = "probe failed"


def probe_source(name: str) -> bytes:
    return resources.files("rentwatch.probes").joinpath(f"{name}.py").read_bytes()


def parse_probe_output(raw: bytes, probe: str, truncated: bool = False) -> dict[str, Any]:
    """The probe's JSON document (its last non-empty line), validated; ProbeError otherwise."""
    if truncated or len(raw) > MAX_PROBE_OUTPUT:
        raise ProbeError(f"{probe} printed more than {MAX_PROBE_OUTPUT // 1024} KiB: cut off")
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        raise ProbeError(f"{probe} printed nothing")
    last = text.splitlines()[-1]
    try:
        doc = json.loads(last)
    except json.JSONDecodeError:
        shown = "".join(ch if ch.isprintable() else "?" for ch in last[:80])
        raise ProbeError(f"{probe} did not print JSON: {shown!r}") from None
    if not isinstance(doc, dict) or doc.get("probe") != probe or doc.get("schema") != 1:
        raise ProbeError(f"{probe} printed JSON of the wrong shape")
    return doc


def preflight_command(checks: CheckPolicy, net_url: str | None = None) -> str:
    """The command line the preflight runs under (its script comes on stdin): the deeper
    checks the policy turns off are skipped on the host, costing nothing."""
    args = ["python3", "-"]
    if not checks.pcie:
        args += ["--pcie-mb", "0"]
    if not checks.vram:
        args.append("--no-vram")
    if not checks.disk:
        args += ["--disk-mb", "-1"]
    if checks.net and net_url:
        args += ["--net-url", net_url]
    return shlex.join(args)


def sampler_command(xid_log: str = "~/.rentwatch/xid.jsonl") -> str:
    """The NVML sampler's command line: XID events waiting now and those the watchdog logged."""
    return f"python3 - --events-ms 0 --xid-log {xid_log}"


def probe_run_blame(
    machine_id: int, image: str, exit_status: int | None, stdout: bytes, stderr: bytes
) -> Blame | None:
    """The campaign's fault behind a probe run, or None when it is (or may be) the host's:
    a shell without python3, a module the image lacks. Read from the shell's stderr and the
    probe's own error, both host-controlled: only matched, never shown unescaped."""
    text = stderr[-2000:].decode("utf-8", errors="replace")
    lines = stdout.decode("utf-8", errors="replace").strip().splitlines()
    if lines:
        try:
            doc = json.loads(lines[-1][:MAX_PROBE_OUTPUT])
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and doc.get("ok") is True:
            return None  # it computed: whatever stderr says is noise
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            text += f"\n{str(err.get('type'))[:80]}: {str(err.get('message'))[:300]}"
    found = blame(Failure(machine_id, image, Stage.PROBE, text, exit_status))
    return found if found.party is not Party.HOST else None
