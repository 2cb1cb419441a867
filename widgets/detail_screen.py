"""One instance in depth (Enter on a pane or a table row): status-line history with times, the
preflight document, utilization, clocks, throttle reasons, memory, temperature and power over
time, jobs, the market's own logs for it, the money so far split GPU/storage, and its ledger
events.

The screen asks the engine (`engine.detail(id)`: `GET /v1/instances/{id}` through its
controller) in a thread worker; it never calls the market or the ledger itself. Every string that
came from a host or the market is drawn as `Text`, never parsed as markup."""

from __future__ import annotations

from typing import Any

from rentwatch.core.decisions import fmt_span
from rentwatch.core.preflight.verdict import THROTTLE_NAMES
from rentwatch.core.preflight.vitals import HOT_C
from rentwatch.core.text import clean
from rentwatch.views.detail import InstanceDetail, JobLine
from rentwatch.views.jobs import progress_bar
from rentwatch.views.snapshot import InstanceSnap, rate_figure
from rich.table import Table
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from .charts import column_chart
from .clock import ago, clock, speed, time_label
from .footer import FittedFooter
from .header import wrap_fields
from .operator import Operator
from .render import PHASE_STYLE, gib, sparkline

REFRESH_S = 2.0  # wall seconds between refreshes of figures (the market's logs: on `g`)
WAIT_S = 20.0  # the longest the worker waits for one answer


def _line(*parts: tuple[str, str] | str) -> Text:
    t = Text()
    for p in parts:
        if isinstance(p, tuple):
            t.append(Text(p[0], style=p[1]))
        else:
            t.append(Text(p))
    return t


def billed_now(d: InstanceDetail) -> str:
    """What it bills per hour now, as the pane, the table and the header say it
    (`snapshot.rate_now`): storage only while its GPU does not bill, nothing once gone."""
    if d.dph_now is None:  # an answer without the figure: by its phase
        if d.phase in ("destroyed", "lost"):
            return "billing nothing"
        if d.phase in ("stopped", "abandoned"):
            return f"${d.storage_dph:.4f}/h storage only"
        return f"${d.gpu_dph + d.storage_dph:.3f}/h"
    rate = f"${rate_figure(d.dph_now, d.gpu_billing_now, d.gpu_dph + d.storage_dph)}/h"
    if d.gpu_billing_now:
        return rate
    return "billing nothing" if d.dph_now == 0 else f"{rate} storage only"


def head_fields(d: InstanceDetail) -> list[Text]:
    """The screen's head as fields, wrapped a field at a time to the screen's width."""
    out = [
        Text(f" i:{d.instance_id} ", style="bold reverse"),
        Text(f"{d.gpu_name}  m:{d.machine_id} h:{d.host_id}"),
        Text(f"{d.phase.upper()}", style=PHASE_STYLE.get(d.phase, "")),
        Text(billed_now(d)),
        Text(f"created {clock(d.created_at)} ({ago(d.now - d.created_at)} ago)"),
    ]
    if d.ended_at is not None:
        out.append(Text(f"left service {clock(d.ended_at)}", style="grey62"))
    times = f"times: {time_label(d.time_scale)}"
    if speed(d.time_scale):
        times += f", {speed(d.time_scale)}"
    out.append(Text(times, style="dim"))
    return out


def render_head(d: InstanceDetail, width: int = 1000) -> Text:
    return Text("\n").join(wrap_fields(head_fields(d), width))


def render_money(d: InstanceDetail) -> Text:
    t = Text()
    t.append("money so far  ", style="bold")
    t.append(f"${d.total_usd:.4f}", style="bold")
    t.append(f" = GPU ${d.gpu_usd:.4f} (${d.gpu_dph:.3f}/h while running)")
    t.append(f" + storage ${d.storage_usd:.4f} (${d.storage_dph:.4f}/h until destroyed)")
    if d.bandwidth_usd:
        t.append(f" + bandwidth ${d.bandwidth_usd:.4f}")
    return t


def render_preflight(d: InstanceDetail) -> Text:
    p = d.preflight
    t = Text()
    t.append("preflight  ", style="bold")
    if not p.get("ran"):
        t.append("not run yet", style="grey50")
        return t
    ok = p.get("ok")
    t.append(
        "passed" if ok else "FAILED" if ok is False else "running",
        style="green" if ok else "bold red" if ok is False else "yellow",
    )
    tflops, expected = p.get("tflops"), p.get("expected")
    if isinstance(tflops, int | float):
        t.append(f"   {tflops:.1f} TFLOP/s")
        if isinstance(expected, int | float) and expected:
            t.append(f" vs {expected:.0f} expected for the model ({tflops / expected:.0%})")
    t.append("\n   NVML name ")
    t.append(Text(clean(p.get("name") or "-", 80), style="cyan"))
    t.append("   driver ")
    t.append(Text(clean(p.get("driver") or "-", 40)))
    t.append("   CUDA ")
    t.append(Text(clean(p.get("cuda") or "-", 20)))
    if p.get("backend"):
        t.append(Text(f"   backend {clean(p.get('backend'), 20)}", style="dim"))
    if p.get("reason") and ok is False:
        t.append("\n   ")
        t.append(Text(clean(p.get("reason"), 200), style="red"))
    return t


SAMPLED_NOW = frozenset(
    {"running", "verifying", "verified", "working", "idle"}
)  # phases whose samples go on


def pct(util: float | None) -> str:
    """A reading as a percentage; one the host did not give is "-", never 0%."""
    return "-" if util is None else f"{util:.0f}%"


def render_gpu(d: InstanceDetail, width: int = 60) -> Text:
    t = Text()
    t.append("GPU over time", style="bold")
    t.append(f"  ({len(d.samples)} samples)\n", style="dim")
    if not d.samples:
        t.append("   no samples yet (they start once the preflight passed)", style="grey50")
        return t
    util = tuple(s.util or 0.0 for s in d.samples)
    clocks = tuple(
        (s.sm_clock or 0.0) / s.max_sm_clock * 100 if s.max_sm_clock else 0.0 for s in d.samples
    )
    # only the reasons that can slow work are marked: NVML's gpu_idle (and the clock
    # settings) is the card at rest, which read "throttle !!!!!" on a stopped rental
    throttled = "".join("!" if set(s.reasons) & THROTTLE_NAMES else "·" for s in d.samples[-width:])
    last = d.samples[-1]
    if d.phase in SAMPLED_NOW:
        t.append(f"   utilization, now {pct(last.util)}\n")
    else:  # a stopped or gone host's last sample is history, not its state
        t.append(f"   utilization {pct(last.util)} at the last sample, {clock(last.at)}")
        t.append(f" (the instance is {d.phase} now)\n", style="dim")
    for line in column_chart(util, width + 9, height=4):  # the samples as columns, in time
        t.append("   ")
        t.append(line)
        t.append("\n")
    t.append("   SM clock ")
    t.append(sparkline(clocks, width), style="magenta")
    if last.sm_clock and last.max_sm_clock:
        t.append(f"  {last.sm_clock:.0f}/{last.max_sm_clock:.0f} MHz")
    t.append("\n   throttle ")
    t.append(throttled, style="red" if "!" in throttled else "grey50")
    slowing = [r for r in last.reasons if r in THROTTLE_NAMES]
    resting = [r for r in last.reasons if r not in THROTTLE_NAMES]
    t.append("  now: " if d.phase in SAMPLED_NOW else "  at the last sample: ")
    t.append(Text(", ".join(slowing) or "none", style="red" if slowing else "grey50"))
    if resting:
        t.append(Text(f" ({', '.join(resting)}: not a slowdown)", style="grey50"))
    t.append(render_vitals(d, width))
    t.append(f"\n   from {clock(d.samples[0].at)} to {clock(last.at)}", style="dim")
    return t


def _series(values: list[float | None], top: float) -> tuple[float, ...]:
    """A series as percentages of `top` for a sparkline; a sample without it reads 0."""
    return tuple(100 * v / top if v is not None and top else 0.0 for v in values)


def render_vitals(d: InstanceDetail, width: int = 60) -> Text:
    """Memory, temperature and power over the samples (each a sparkline against its own top:
    the card's memory, 100 C, the enforced power limit), then fan and ECC as last read. A
    figure the card did not report says so, never 0."""
    t = Text()
    samples = d.samples[-width:]
    last = samples[-1]
    if not any(s.mem_used_mb or s.temp_c or s.power_w for s in samples):
        t.append("\n   memory, temperature, power: ")
        t.append("not reported by the host's NVML", style="grey50")
        return t
    mem_top = max((s.mem_total_mb or 0.0 for s in samples), default=0.0)
    power_top = max((s.power_limit_w or s.power_w or 0.0 for s in samples), default=0.0)
    rows: list[tuple[str, tuple[float, ...], str, str]] = [
        (
            "memory  ",
            _series([s.mem_used_mb for s in samples], mem_top),
            "-"
            if last.mem_used_mb is None
            else f"{gib(last.mem_used_mb)}"
            + (f"/{gib(last.mem_total_mb)}" if last.mem_total_mb is not None else "")
            + " GiB",
            "",
        ),
        (
            "temp    ",
            _series([s.temp_c for s in samples], 100.0),
            "-" if last.temp_c is None else f"{last.temp_c:.0f}°C",
            "bold red" if last.temp_c is not None and last.temp_c >= HOT_C else "",
        ),
        (
            "power   ",
            _series([s.power_w for s in samples], power_top),
            "-"
            if last.power_w is None
            else f"{last.power_w:.0f}"
            + (f"/{last.power_limit_w:.0f}" if last.power_limit_w is not None else "")
            + " W",
            "yellow"
            if last.power_w is not None
            and last.power_limit_w
            and last.power_w >= 0.97 * last.power_limit_w
            else "",
        ),
    ]
    for label, series, now, style in rows:
        t.append(f"\n   {label}")
        t.append(sparkline(series, width), style="green")
        t.append("  ")
        t.append(now or "-", style=style)
    t.append("\n   fan ")
    t.append("-" if last.fan_pct is None else f"{last.fan_pct:.0f}%")
    t.append("   ECC errors ")
    if last.ecc_corrected is None and last.ecc_uncorrected is None:
        t.append("not reported (no ECC)", style="grey50")
    else:
        unc = last.ecc_uncorrected
        t.append(
            f"corrected {_count(last.ecc_corrected)}, uncorrected {_count(unc)}",
            style="bold red" if unc else "",
        )
    t.append("   retired pages ")
    t.append(_count(last.retired_pages), style="bold red" if last.retired_pages else "")
    return t


def _count(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def render_status_history(d: InstanceDetail) -> Table:
    table = Table(
        title=f"status line ({time_label(d.time_scale)})",
        title_justify="left",
        expand=True,
        show_edge=False,
    )
    table.add_column("at", width=8, no_wrap=True)
    table.add_column("status", width=10, no_wrap=True)
    table.add_column("message", ratio=1, overflow="fold")
    lines = d.status_history[-20:]
    left = d.ended_at
    for s in lines:
        if left is not None and s.at > left:  # the market's own "stopped" comes after the act
            table.add_row(clock(left), Text(d.phase), Text("left service", style="dim"))
            left = None
        table.add_row(clock(s.at), Text(s.status or "-"), Text(s.msg or "-"))
    if d.ended_at is None:  # a rental that left service has no "now": its last line is above
        table.add_row(
            Text("now", style="bold"),
            Text(d.status or "-"),
            Text(d.status_msg or "-", style="bold"),
        )
    elif left is not None:
        table.add_row(clock(left), Text(d.phase), Text("left service", style="dim"))
    return table


def job_progress(j: JobLine) -> Text:
    """A running job's bar, ETA and delivered speed; '-' where nothing says."""
    t = Text()
    if j.progress is not None:
        t.append(progress_bar(j.progress, 10), style="green")
        t.append(f" {j.progress:.0%}")
    if j.eta_s is not None:
        t.append(f" ETA {'~' if j.eta_estimated else ''}{fmt_span(j.eta_s)}")
    if j.tflops is not None:
        t.append(f" {j.tflops:.0f} TFLOP/s")
    return t if t.plain else Text("-")


def render_jobs(d: InstanceDetail) -> Table | Text:
    if not d.jobs:
        return Text("jobs  none ran here", style="grey50")
    table = Table(title="jobs", title_justify="left", expand=True, show_edge=False)
    for c in ("job", "state", "started", "ended", "exit", "progress", "last log line"):
        table.add_column(c, overflow="fold", ratio=1 if c == "last log line" else None)
    for j in d.jobs:
        table.add_row(
            Text(j.name),
            Text(j.status),
            clock(j.started_at),
            clock(j.finished_at),
            "-" if j.exit_code is None else str(j.exit_code),
            job_progress(j),
            Text(j.last_line or "-"),
        )
    return table


def render_logs(d: InstanceDetail, fetched_at: float | None) -> Text:
    t = Text()
    t.append("market logs", style="bold")
    t.append(
        "  (the marketplace's own log of this instance; g fetches again"
        + (f", fetched {clock(fetched_at)})" if fetched_at is not None else ")"),
        style="dim",
    )
    if d.market_logs_error:
        t.append("\n   ")
        t.append(Text(d.market_logs_error, style="yellow"))
    if not d.market_logs and not d.market_logs_error:
        t.append("\n   (empty)", style="grey50")
    for line in d.market_logs[-20:]:
        t.append("\n   ")
        t.append(Text(line))
    return t


def render_events(d: InstanceDetail, width: int = 200) -> Table:
    """The instance's ledger events; under 110 columns the seq, kind, actor and ok share one
    column, so the reason keeps most of the width (at 80 it had 13 columns, a word a line)."""
    table = Table(
        title=f"ledger events ({time_label(d.time_scale)})",
        title_justify="left",
        expand=True,
        show_edge=False,
    )
    narrow = width < 110
    if narrow:
        table.add_column("at", width=8, no_wrap=True)
        table.add_column("event", width=24, overflow="fold")  # a long actor wraps, whole
    else:
        table.add_column("seq", justify="right", min_width=6, no_wrap=True)
        table.add_column("at", width=8, no_wrap=True)
        table.add_column("kind", min_width=16, no_wrap=True)
        table.add_column("actor", min_width=16, no_wrap=True)
        table.add_column("ok", width=3)
    table.add_column("reason", ratio=1, overflow="fold")
    for e in d.events[-30:]:
        ok = "-" if e.ok is None else "✔" if e.ok else "✘"
        if narrow:
            event = Text(f"{e.kind}\n")
            event.append(f"#{e.seq} {ok} {e.actor}", style="grey50")
            table.add_row(clock(e.at), event, Text(e.reason))
        else:
            table.add_row(str(e.seq), clock(e.at), Text(e.kind), Text(e.actor), ok, Text(e.reason))
    return table


class DetailScreen(Screen[None]):
    BINDINGS = [
        Binding(
            "escape,enter", "app.pop_screen", "Back", tooltip="Back to the fleet", id="detail.back"
        ),
        Binding("s", "stop", "Stop", tooltip="Stop this instance (may ask)", id="detail.stop"),
        Binding(
            "d",
            "destroy",
            "Destroy",
            tooltip="Destroy this instance (asks: type its id)",
            id="detail.destroy",
        ),
        Binding("a", "start", "Start", tooltip="Start this instance", id="detail.start"),
        Binding(
            "g",
            "fetch_logs",
            "Fetch market logs",
            tooltip="Fetch this instance's market logs again",
            id="detail.logs",
        ),
        Binding(
            "H",
            "hand_over",
            "Hand over",
            tooltip="Hand this observed instance over to automation (asks; recorded)",
            id="detail.hand_over",
            show=False,
        ),
    ]
    ACTS = frozenset({"stop", "destroy", "start", "hand_over"})  # through the operator

    def __init__(self, engine: Any, instance_id: int, operator: Operator | None = None) -> None:
        super().__init__()
        self.engine = engine
        self.instance_id = instance_id
        self.operator = operator  # None: a screen that shows, and acts on nothing
        self.detail: InstanceDetail | None = None
        self.logs: tuple[tuple[str, ...], str, float | None] = ((), "asking the market…", None)
        self.error = ""

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in self.ACTS:
            return True
        if self.operator is None or self.operator.controller_ended() is not None:
            return False
        return not self.operator.refused_after_end(action)

    def on_key(self, event: events.Key) -> None:
        if self.operator is not None and self.operator.say_refused(self, event.key):
            event.stop()

    def _instance(self) -> InstanceSnap | None:
        """This instance as the fleet's latest snapshot has it (what its keys act on)."""
        return self.operator.instance(self.instance_id) if self.operator else None

    def action_stop(self) -> None:
        if self.operator:
            self.operator.stop(self._instance())

    def action_start(self) -> None:
        if self.operator:
            self.operator.start(self._instance())

    def action_destroy(self) -> None:
        if self.operator:
            self.operator.destroy(self._instance())

    def action_hand_over(self) -> None:
        if self.operator:
            self.operator.hand_over(self._instance())

    def compose(self) -> ComposeResult:
        yield Static(Text(f" i:{self.instance_id}  reading…"), id="detail-head")
        with VerticalScroll(id="detail-body"):
            yield Static("", id="detail-money")
            yield Static("", id="detail-preflight")
            yield Static("", id="detail-gpu")
            yield Static("", id="detail-status")
            yield Static("", id="detail-jobs")
            yield Static("", id="detail-logs")
            yield Static("", id="detail-events")
        yield FittedFooter()

    def on_mount(self) -> None:
        self.load(True)
        self.set_interval(REFRESH_S, self._tick)

    def _tick(self) -> None:
        # one question at a time: a slow controller or market is not asked again meanwhile
        if not any(w.is_running for w in self.workers if w.group == "detail"):
            self.load(False)

    def action_fetch_logs(self) -> None:
        self.logs = ((), "asking the market…", self.logs[2])
        self.load(True)

    @work(thread=True, exclusive=False, group="detail", exit_on_error=False)
    def load(self, logs: bool) -> None:
        try:
            d: InstanceDetail | Exception = self.engine.detail(self.instance_id, logs).result(
                WAIT_S
            )
        except Exception as exc:  # the engine, the controller or the link: said on screen
            d = exc
        self.app.call_from_thread(self._show, d, logs)

    def _show(self, d: InstanceDetail | Exception, logs: bool) -> None:
        if not self.is_mounted:
            return
        if isinstance(d, Exception):
            self.error = clean(f"{type(d).__name__}: {d}", 300)
            self.query_one("#detail-head", Static).update(
                Text(f" i:{self.instance_id}  could not read it: {self.error}", style="bold red")
            )
            return
        self.error = ""
        if logs:
            self.logs = (d.market_logs, d.market_logs_error, d.now)
        self.detail = d
        shown = InstanceDetail(
            **{
                **{f: getattr(d, f) for f in d.__dataclass_fields__},
                "market_logs": self.logs[0],
                "market_logs_error": self.logs[1],
            }
        )
        self.query_one("#detail-head", Static).update(render_head(shown, self.size.width))
        self.query_one("#detail-money", Static).update(render_money(shown))
        self.query_one("#detail-preflight", Static).update(render_preflight(shown))
        width = max(16, min(120, self.size.width - 30))
        self.query_one("#detail-gpu", Static).update(render_gpu(shown, width))
        self.query_one("#detail-status", Static).update(render_status_history(shown))
        self.query_one("#detail-jobs", Static).update(render_jobs(shown))
        self.query_one("#detail-logs", Static).update(render_logs(shown, self.logs[2]))
        self.query_one("#detail-events", Static).update(render_events(shown, self.size.width))
