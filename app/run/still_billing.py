"""What a run leaves billing, said as its last lines: each rental still on the market with what it
bills per hour, and the `rentwatch end` command that ends them, as it works when pasted."""

from __future__ import annotations

from ..core.lifecycle import Phase
from ..engine import ending
from ..engine.attempt import Attempt
from ..engine.supervisor import Supervisor


def end_command(sup: Supervisor, campaign: str, ledger_path: str, destroy: bool) -> str:
    url = sup.market.base_url
    return ending.end_command(campaign, ledger_path, url, destroy)


def _state(a: Attempt) -> tuple[str, float]:
    """A rental's state in words and what it bills per hour in that state."""
    both = a.gpu_dph + a.storage_dph
    if a.life.phase == Phase.STOPPED and a.resumes_by_itself:
        return "paused by the market (a bid: resumes by itself unless stopped)", both
    if a.life.phase == Phase.STOPPED:
        return "stopped (storage only)", a.storage_dph
    if a.life.phase == Phase.ABANDONED:
        return "given up, its destroy not confirmed", both
    proven = "verified" if a.passed_preflight else "never verified"
    return f"{a.life.phase.value} ({proven}), stop not confirmed", both


def still_billing(sup: Supervisor, campaign: str, ledger_path: str) -> list[str]:
    """The last lines of a run that did not end well: what it leaves on the market, and how
    to end it; one line when nothing is left."""
    left = sorted(sup.fleet.on_market(), key=lambda a: a.instance_id)
    if not left:
        return [f"left billing: nothing of {campaign} is on the market as this run last saw it"]
    lines = [f"left billing: {len(left)} rental(s) of {campaign} still on the market:"]
    for a in left:
        state, dph = _state(a)
        lines.append(f"  i:{a.instance_id} m:{a.machine_id} {a.gpu_name}: {state}, ${dph:.4f}/h")
    stopped = all(a.life.phase == Phase.STOPPED and not a.resumes_by_itself for a in left)
    lines.append(f"end them: {end_command(sup, campaign, ledger_path, stopped)}")
    if not stopped and any(a.life.phase == Phase.STOPPED for a in left):
        lines.append("  (add --destroy to end the stopped ones' storage too)")
    return lines
