"""Turning an instance snapshot into lines of Rich Text. Host text goes in as plain strings
(Text(...) never parses markup), through `rentwatch.core.text.clean`, the one sanitiser every
output path uses (the snapshot cleans too; cleaning twice costs little and keeps this module
safe whatever snapshot it is handed)."""

from __future__ import annotations

from rentwatch.core.decisions import fmt_span
from rentwatch.core.preflight.vitals import HOT_C
from rentwatch.core.text import clean
from rentwatch.views.jobs import progress_bar
from rentwatch.views.snapshot import FleetReadout, InstanceSnap
from rich.text import Text

PHASE_STYLE = {
    "requested": "grey62",
    "booting": "yellow",
    "running": "cyan",
    "verifying": "bold cyan",
    "verified": "bold green",
    "working": "bold green",
    "idle": "green",
    "stopped": "grey62",
    "outbid": "bold magenta",
    "abandoned": "red",
    "destroyed": "grey42",
    "lost": "bold red",
}
BARS = "▁▂▃▄▅▆▇█"


def spent(usd: float) -> str:
    """The campaign's spend, as the bar's "spent" field and its budget bar both say it."""
    return f"${usd:.3f}"


def sparkline(values: tuple[float, ...], width: int = 16) -> str:
    vals = values[-width:]
    return "".join(BARS[min(7, int(max(0.0, v) / 100 * 7.999))] for v in vals)


# what a pane's first line gives up, in this order, to keep its billed figure in sight
HEAD_DROPS = ((), ("host",), ("host", "pad"), ("host", "pad", "machine"))


def _head(s: InstanceSnap, selected: bool, drop: tuple[str, ...]) -> Text:
    """A pane's first line up to its billed figure, less what `drop` names."""
    faded = s.ended_at is not None
    head = Text(style=("reverse " if selected else "") + ("grey50" if faded else ""))
    head.append(f" i:{s.instance_id} ", style="bold")
    head.append(Text(clean(s.gpu_name, 40)))
    machine = "" if "machine" in drop else f"m:{s.machine_id} "
    host = "" if "host" in drop else f"h:{s.host_id}"
    head.append(f"  {machine}{host}".rstrip() + f"  {rate_text(s)}  ")
    phase = s.phase.upper() if "pad" in drop else f"{s.phase.upper():<9}"
    head.append(phase, style=PHASE_STYLE.get(s.phase, ""))
    head.append(f"  billed ${s.billed_usd:.4f}", style="bold" if not faded else "grey50")
    return head


def pane_lines(s: InstanceSnap, selected: bool, width: int | None = None) -> list[Text]:
    """A pane's lines; at `width` its first keeps the billed figure whole (the host id, the
    phase's padding and the machine id give way first), what follows it cut at the edge."""
    faded = s.ended_at is not None
    base = "grey50" if faded else ""
    for drop in HEAD_DROPS:
        head = _head(s, selected, drop)
        if width is None or head.cell_len <= width:
            break
    if s.dph_now and not s.gpu_billing_now:  # what its $/h is: no GPU in it
        head.append("  $/h storage only", style="dim")
    if s.failure_class:
        head.append(f"  [{clean(s.failure_class, 40)}]", style="red")
    if not s.supervised:
        head.append("  not rentwatch's: observed only", style="yellow")

    status = Text("   ", style=base)
    if s.phase == "outbid":  # the bid against what beats it now, and the pause so far
        low = f"${s.bid_floor:.4f}/h" if s.bid_floor is not None else "unknown"
        status.append(f"OUTBID: bid ${s.bid or 0:.4f}/h vs bid floor {low}", style="magenta")
        status.append(f", paused {fmt_span(s.paused_s or 0)}", style="magenta")
    elif faded and s.left_why:  # who ended it and why, not the market's last word before
        status.append("left service: ", style=base)
        status.append(Text(clean(s.left_why, 160), style=base))
    else:
        status.append(
            Text(f"{clean(s.status, 20) or 'provisioning'}", style="bold" if not faded else base)
        )
        # the freeze timer before the market's text, which is long and cut at the pane's edge
        if not faded and s.status != "running" and s.freeze_window_s:
            frac = s.status_age_s / s.freeze_window_s
            colour = "red" if frac >= 0.8 else "yellow" if frac >= 0.5 else "green"
            status.append(
                f" (unchanged {fmt_span(s.status_age_s)} / {fmt_span(s.freeze_window_s)})",
                style=colour,
            )
        status.append(": ", style="bold" if not faded else base)
        status.append(Text(clean(s.status_msg, 160) or "-", style=base))

    if s.job and not faded:
        status.append("  job ", style="bold")
        status.append(Text(clean(s.job, 120), style="cyan"))

    gpu = Text("   ", style=base)
    util = live_util(s)
    if util is not None:
        gpu.append(f"GPU {util:3.0f}% ")
        gpu.append(sparkline(s.util_history), style="cyan" if not faded else base)
        if s.sm_clock and s.max_sm_clock:
            gpu.append(f"  SM {s.sm_clock:.0f}/{s.max_sm_clock:.0f} MHz")
    else:
        gpu.append("GPU -", style="grey50")
    gpu.append("  throttle: ")
    if s.phase in ENDED:  # the last reading of a GPU no longer rented is not news
        gpu.append("-", style="grey50")
    else:
        throttle = clean(s.throttle, 200)
        gpu.append(Text(throttle or "none", style="bold red" if throttle else "grey50"))
    if util is not None:  # after the throttle, which says more when the line is cut
        gpu.append(vitals_text(s))
    if s.verdict:
        gpu.append("  preflight: ")
        verdict = clean(s.verdict, 120)
        gpu.append(Text(verdict, style="red" if verdict.startswith("FAILED") else "green"))
    lines = [head, status, gpu]
    if not faded and s.job and (s.job_progress is not None or s.job_eta_s is not None):
        lines.append(work_line(s))
    return [*lines, Text("")]


def rate_text(s: InstanceSnap) -> str:
    """What it bills per hour now (`InstanceSnap.rate`); four places where the GPU does not
    bill (storage only: a stopped rental's cents)."""
    return f"${s.rate_figure}/h"


def gib(mb: float) -> str:
    return f"{mb / 1024:.1f}"


def vitals_text(s: InstanceSnap) -> Text:
    """The last sample's temperature, power against its limit and memory, as fits a pane's
    line: hot in red, drawing at its cap in yellow; what the card did not report is left out."""
    t = Text()
    if s.temp_c is not None:
        t.append(f"  {s.temp_c:.0f}°C", style="bold red" if s.temp_c >= HOT_C else "")
    if s.power_w is not None:
        capped = s.power_limit_w is not None and s.power_w >= 0.97 * s.power_limit_w
        limit = f"/{s.power_limit_w:.0f}" if s.power_limit_w is not None else ""
        t.append(f"  {s.power_w:.0f}{limit} W", style="yellow" if capped else "")
    if s.mem_used_mb is not None:
        total = f"/{gib(s.mem_total_mb)}" if s.mem_total_mb is not None else ""
        t.append(f"  mem {gib(s.mem_used_mb)}{total} GiB")
    return t


def work_line(s: InstanceSnap) -> Text:
    """The running job's progress bar, its ETA, and the host's delivered speed against its
    model's (a share well under 1 is a host underdelivering: throttled, or not the card)."""
    t = Text("   ")
    if s.job_progress is not None:
        t.append("work ▕", style="bold")
        t.append(progress_bar(s.job_progress), style="green")
        t.append(f"▏ {s.job_progress:4.0%}")
    else:
        t.append("work ", style="bold")
        t.append("no progress file", style="grey50")
    if s.job_eta_s is not None:
        guess = "~" if s.job_eta_source != "progress" else ""
        t.append(f"  ETA {guess}{fmt_span(s.job_eta_s)}")
    if s.job_tflops is not None:
        t.append(f"  delivering {s.job_tflops:.0f}")
        if s.model_tflops:
            share = s.job_tflops / s.model_tflops
            colour = "red" if share < 0.8 else "yellow" if share < 0.93 else "green"
            t.append(f"/{s.model_tflops:.0f} TFLOP/s ")
            t.append(f"({share:.0%} of its model)", style=colour)
        else:
            t.append(" TFLOP/s")
    return t


ENDED = ("stopped", "abandoned", "destroyed", "lost")  # no GPU of these runs for us now


def live_util(s: InstanceSnap) -> float | None:
    """The GPU's last utilization while the container runs; none once it is stopped or gone
    (a stopped rental's last sample, 97%, read as a busy GPU)."""
    return None if s.phase in ENDED else s.util


def campaign_fields(f: FleetReadout) -> list[Text]:
    """The bar's first line as fields, each kept whole when the bar wraps (header.wrap_fields):
    at 120 columns "spent" and its figure were on two lines."""
    out = [Text(f" {clean(f.campaign, 60)} ", style="bold reverse")]
    if f.observe_only:
        out.append(
            Text(
                "OBSERVE ONLY: automation touches nothing (hand an instance over to change that)",
                style="bold yellow",
            )
        )
    # "verified" is the receipt's (passed a preflight in this campaign); the fleet is what is
    # in service now out of what the operator wants
    # more in service than wanted (a verified spare at work, a fleet just made smaller): said
    # as such, not as "4/3"
    serving = (
        f"{f.in_service}/{f.fleet}"
        if f.in_service <= f.fleet
        else f"{f.in_service} ({f.fleet} wanted)"
    )
    out += [
        Text(f"policy {f.policy}"),
        Text(f"in service {serving}"),
        Text(f"verified {f.verified}"),
        Text(f"creates {f.creates}/{f.max_creates}"),
        Text(f"duds {f.duds} ({f.dud_share:.0%}), ").append(
            f"${f.dud_usd:.3f} lost", style="red" if f.dud_usd else ""
        ),
    ]
    # never delivered, no fault of the host's: apart from the duds, as the receipt counts them
    if f.stopped_by_market:
        out.append(Text(f"outbid or market-stopped {f.stopped_by_market}"))
    if f.cancelled:
        out.append(Text(f"cancelled unproven {f.cancelled}"))
    out += [
        Text(f"spent {spent(f.spent_usd)}", style="bold"),
        Text(f"GPU-h {f.gpu_hours:.2f}"),
    ]
    per = f.usd_per_gpu_hour
    out.append(Text(f"$/GPU-h {per:.3f}" if per is not None else "$/GPU-h -"))
    out.append(Text(f"quarantined {f.quarantined}"))
    if f.banner:  # host-controlled text inside (a status line): plain, cleaned, cut
        out.append(Text(f"⚠ {clean(f.banner, 160)}", style="bold red"))
    if f.observed:
        out.append(Text(f"not rentwatch's {f.observed} (${f.observed_dph:.3f}/h)", style="yellow"))
    if f.finished:
        out.append(Text(f"✔ done: {clean(f.finished, 120)}", style="green"))
    return out


def engine_failed(f: FleetReadout) -> Text | None:
    """The bar's first line while the engine cannot supervise, else None."""
    if not f.engine_error:
        return None
    t = Text(" ENGINE FAILED ", style="bold reverse red")
    t.append(f" {clean(f.engine_error, 200)}", style="bold red")
    return t


def campaign_bar(f: FleetReadout) -> Text:
    """The fields on one line (the dashboard wraps them to its width, a field at a time)."""
    fields = Text("   ").join(campaign_fields(f))
    failed = engine_failed(f)
    return fields if failed is None else Text("\n").join((failed, fields))
