"""Notices and their delivery: builders, levels, scrubbing, and the notifier against real local
receivers through apprise's own `json://` URL (one that answers, one that hangs, one that
refuses)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.notify import events
from rentwatch.notify.events import Notice, scrub, should_send
from rentwatch.notify.notifier import Notifier, load_user_config, user_config_path

from tests.shown_text import is_clean

API_KEY = "vast-key-0123456789abcdef"
TOKEN = "controller-token-ZYXWVU"
KEY_PATH = "/home/op/.ssh/rentwatch_ed25519"
SECRETS = (API_KEY, TOKEN, KEY_PATH)
# below the default level: routine work that wakes nobody
ROUTINE = Notice(kind="routine", level="info", title="c: routine", body="b", key=None)


class Receiver:
    """A local HTTP endpoint: `mode` "ok" (200), "refuse" (500) or "hang" (no answer until
    closed). Records every body it was sent."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.bodies: list[bytes] = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                receiver.bodies.append(self.rfile.read(length))
                if receiver.mode == "hang":
                    receiver.release.wait(30)
                    return
                self.send_response(200 if receiver.mode == "ok" else 500)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def url(self, path: str = "hook", creds: str = "") -> str:
        return f"json://{creds}127.0.0.1:{self.port}/{path}"

    def messages(self) -> list[dict]:
        return [json.loads(b) for b in self.bodies]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Callable[[str], Receiver]]:
    made: list[Receiver] = []

    def make(mode: str = "ok") -> Receiver:
        r = Receiver(mode)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_delivers_to_a_real_receiver_through_apprise_json(receiver) -> None:
    r = receiver("ok")
    # the same URL from two sources (campaign, --notify, user config) is sent to once
    n = Notifier([r.url(), r.url()], min_level="warning", secrets=SECRETS, fold_window_s=0)
    notice = events.notice(
        "host_lost",
        "qlora-sweep",
        instance_id=1001,
        # a host- or market-controlled reason that echoes secrets and carries escapes
        reason=f"ssh refused for key {KEY_PATH} \x1b]52;c;cHduZWQ=\x07(api_key={API_KEY}, {TOKEN})",
    )
    assert n.notify(notice)
    assert n.close(10)
    assert n.sent == 1 and n.failures == 0
    (msg,) = r.messages()
    assert msg["title"] == "qlora-sweep: verified instance 1001 lost"
    assert "What happened: Verified instance 1001 was lost" in msg["message"]
    assert "What rentwatch did:" in msg["message"]
    assert "What you may want to do:" in msg["message"]
    assert msg["type"] == "warning"
    raw = r.bodies[0].decode()
    for secret in SECRETS:
        assert secret not in raw
    assert "[redacted]" in msg["message"]
    assert "\x1b" not in msg["message"] and "]52;" not in msg["message"]


def test_campaign_end_carries_the_receipt_figures(receiver) -> None:
    r = receiver("ok")
    n = Notifier([r.url()], secrets=SECRETS)
    n.notify(
        events.notice(
            "campaign_end",
            "qlora-sweep",
            creates=12,
            duds=7,
            spent_usd=3.456,
            usd_per_gpu_hour=0.4123,
            jobs_finished=3,
            stopped=2,
            destroyed=1,
            apart=4,
        )
    )
    assert n.close(10)
    (msg,) = r.messages()
    assert msg["title"] == "qlora-sweep: done, $3.46 spent, $0.41/GPU-h"
    assert (
        "12 creates, 7 duds (and 4 more never delivered: outbid or cancelled), $3.46 spent, "
        "$0.41/GPU-h, 3 job(s) finished" in msg["message"]
    )
    # [AC 7] what the end did, as it was recorded: one stopped and one destroyed is not "0"
    assert "Stopped 2 instances and destroyed 1 instance it still held." in msg["message"]


def test_what_an_end_did_is_said_in_plain_counts() -> None:
    from rentwatch.notify.wording import released

    assert released(1, 1) == "Stopped 1 instance and destroyed 1 instance it still held."
    assert released(0, 2) == "Destroyed 2 instances it still held."
    assert released(3, 0) == "Stopped 3 instances it still held."
    assert released(0, 0) == "Stopped nothing: none of its instances was still running."


@pytest.mark.parametrize("mode", ["hang", "refuse"])
def test_a_bad_receiver_never_slows_notify_and_failures_are_counted(receiver, mode) -> None:
    r = receiver(mode)
    failed: list[tuple[str, str]] = []
    n = Notifier(
        [r.url(creds="user:hunter2pw@")],
        min_level="info",
        secrets=SECRETS,
        on_failure=lambda url, reason: failed.append((url, reason)),
        deadline_s=0.5,
        retries=1,
        backoff_s=0.05,
        fold_window_s=0,
        queue_size=5,
    )
    sent_from: set[str] = set()
    deliver = n._deliver

    def deliver_seen(*a, **k):  # type: ignore[no-untyped-def]
        sent_from.add(threading.current_thread().name)
        return deliver(*a, **k)

    n._deliver = deliver_seen  # type: ignore[method-assign]
    for i in range(12):  # more than the queue holds: the rest dropped, never waited for
        n.notify(events.notice("host_lost", "c", instance_id=1000 + i, reason="froze"))
    assert wait_for(lambda: n.failures >= 1)
    # the caller only queued: every delivery, hung or refused, ran on the notifier's thread
    assert sent_from == {"rentwatch-notifier"}
    n.close(5)
    assert n.sent == 0
    assert n.dropped > 0  # 12 notices into a queue of 5 behind a receiver that fails
    url, reason = failed[0]
    assert "hunter2pw" not in url and f"127.0.0.1:{r.port}/hook" in url
    assert ("no answer" in reason) if mode == "hang" else ("refused after 2 tries" in reason)
    if mode == "refuse":
        assert len(r.bodies) >= 2  # retried


def test_unusable_url_is_a_counted_failure_not_an_error() -> None:
    failed: list[tuple[str, str]] = []
    n = Notifier(["nonsense-scheme://whatever"], on_failure=lambda u, r: failed.append((u, r)))
    n.notify(events.notice("key_refused", "c"))
    n.close(5)
    assert n.failures == 1 and failed and "apprise" in failed[0][1]


def test_repeats_with_one_key_are_folded_into_one(receiver) -> None:
    r = receiver("ok")
    n = Notifier([r.url()], fold_window_s=0.4)
    for _ in range(4):
        n.notify(events.notice("host_offline", "c", instance_id=42))
    n.notify(events.notice("host_offline", "c", instance_id=43))  # another key: its own message
    assert wait_for(lambda: len(r.bodies) >= 3, timeout=5)
    n.close(5)
    titles = [m["title"] for m in r.messages()]
    assert titles.count("c: host of instance 42 offline") == 1
    assert "c: host of instance 42 offline (again, 3 more times)" in titles
    assert "c: host of instance 43 offline" in titles
    assert len(titles) == 3 and n.folded == 3


def test_pending_folds_are_sent_on_close(receiver) -> None:
    r = receiver("ok")
    n = Notifier([r.url()], fold_window_s=60)
    n.notify(events.notice("budget_80", "c", spent_usd=16.0, budget_usd=20.0))
    n.notify(events.notice("budget_80", "c", spent_usd=16.5, budget_usd=20.0))
    assert n.close(5)
    assert [m["title"] for m in r.messages()] == [
        "c: 80% of budget spent ($16.00 of $20.00)",
        "c: 80% of budget spent ($16.50 of $20.00) (again, 1 more time)",
    ]


def test_level_filtering(receiver) -> None:
    r = receiver("ok")
    n = Notifier([r.url()], min_level="warning", fold_window_s=0)
    assert not n.notify(ROUTINE)
    assert not n.notify(
        events.notice("campaign_end", "c", creates=1, duds=0, spent_usd=0.1, usd_per_gpu_hour=None)
    )
    assert n.notify(
        events.notice("market_unreachable", "c", error="timed out", since_s=125, held=3)
    )
    n.close(5)
    assert n.filtered == 2
    assert [m["title"] for m in r.messages()] == ["c: market unreachable for 2m05s"]


def test_default_level_sends_the_end_and_not_routine_work() -> None:
    end = events.notice(
        "campaign_end", "c", creates=1, duds=0, spent_usd=0.0, usd_per_gpu_hour=None
    )
    assert should_send(end, events.DEFAULT_MIN_LEVEL)
    assert not should_send(ROUTINE, events.DEFAULT_MIN_LEVEL)
    for kind, w in events.WORDING.items():
        assert events.level_rank(w.level) >= events.level_rank(events.DEFAULT_MIN_LEVEL), kind


def test_an_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError):
        Notifier([], min_level="loud")


def test_every_builder_makes_a_one_line_title_and_three_part_body() -> None:
    hostile = "\x1b[2J\x1b]0;owned\x07evil\r\nline\u202etxt" + "x" * 500
    made = [
        events.notice("campaign_fault", "c", cause=hostile, image="bad/image:" + hostile),
        events.notice("campaign_fault", "c", cause="pull denied"),
        events.notice("budget_80", "c", spent_usd=16, budget_usd=20),
        events.notice("budget_100", "c", spent_usd=20.01, budget_usd=20),
        events.notice("host_lost", "c", instance_id=1, reason=hostile),
        events.notice("xid_stop", "c", instance_id=1, xid=79),
        events.notice("host_offline", "c", instance_id=1),
        events.notice("outbid", "c", instance_id=1, job="j"),
        events.notice("key_refused", "c", detail=hostile),
        events.notice("market_unreachable", "c", error=hostile, since_s=30, held=2),
        events.notice("controller_trapped", "c", signal="SIGTERM", stopped=2, left=1),
        events.notice("controller_exit", "c", reason=hostile, stopped=0),
        events.notice("job_failed", "c", job=hostile, attempts=3, last_error=hostile),
        events.notice("campaign_end", "c", creates=3, duds=1, spent_usd=1, usd_per_gpu_hour=0.5),
    ]
    assert {n.kind for n in made} == set(events.WORDING)
    for n in made:
        assert n.level in events.LEVELS
        assert 0 < len(n.title) <= events.TITLE_LIMIT and is_clean(n.title), n.title
        assert "owned" not in n.title and "\x1b" not in n.body
        parts = n.body.split("\n")
        assert [p.split(":")[0] for p in parts] == [
            "What happened",
            "What rentwatch did",
            "What you may want to do",
        ]
        assert all(is_clean(p) for p in parts)
        assert len(n.body) <= events.BODY_LIMIT and n.key


def test_campaign_fault_names_the_image_and_that_creates_stopped() -> None:
    n = events.notice(
        "campaign_fault", "c", cause="pull access denied", image="ghcr.io/acme/private:1"
    )
    assert "ghcr.io/acme/private:1" in n.title and "creates stopped" in n.title
    assert n.level == "critical"


def test_trapped_with_nothing_left_says_so() -> None:
    assert (
        "Nothing it held is left running"
        in events.notice("controller_trapped", "c", signal="SIGHUP", stopped=2, left=0).body
    )


# scrub


@pytest.mark.parametrize(
    "text, expected",
    [
        ("plain", "plain"),
        ("a\x1b[31mred\x1b[0m", "ared"),
        ("clip\x1b]52;c;ZXZpbA==\x07board", "clipboard"),
        ("title\x1b]0;pwn\x1b\\x", "titlex"),
        ("8bit\x9b2Jcsi", "8bitcsi"),
        ("nul\x00bel\x07del\x7f", "nulbeldel"),
        ("bidi\u202eevil\u2066", "bidievil"),
        ("two\nlines", "two\nlines"),
        ("crlf\r\nkept", "crlf\nkept"),
    ],
)
def test_scrub_cleans(text: str, expected: str) -> None:
    assert scrub(text) == expected


def test_scrub_removes_secrets_even_split_by_escapes_and_before_a_cut() -> None:
    split = API_KEY[:8] + "\x1b[0m" + API_KEY[8:]
    out = scrub(f"key={split} tok={TOKEN} path={KEY_PATH}", SECRETS)
    assert out == "key=[redacted] tok=[redacted] path=[redacted]"
    # the cap falls inside where the secret was: no half of it survives
    cut = scrub("x" * 10 + API_KEY, SECRETS, limit=15)
    assert API_KEY[:4] not in cut and len(cut) <= 15


def test_scrub_caps_lines_and_ignores_short_or_empty_secrets() -> None:
    out = scrub("a" * 1000 + "\n" + "b", ("", None, "ab"))
    first, second = out.split("\n")
    assert len(first) == events.LINE_LIMIT and first.endswith("…") and second == "b"
    assert scrub("cab", ["ab"]) == "cab"  # too short to be a secret: ordinary text survives


# the user's config file


def test_user_config_path_follows_xdg(tmp_path: Path) -> None:
    assert user_config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == (
        tmp_path / "rentwatch" / "config.toml"
    )
    assert user_config_path({"XDG_CONFIG_HOME": "relative"}) == (
        Path.home() / ".config" / "rentwatch" / "config.toml"
    )
    assert user_config_path({}) == Path.home() / ".config" / "rentwatch" / "config.toml"


def test_load_user_config(tmp_path: Path) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert load_user_config(env=env).urls == ()
    assert load_user_config(env=env).level == events.DEFAULT_MIN_LEVEL
    path = tmp_path / "rentwatch" / "config.toml"
    path.parent.mkdir()
    path.write_text('notify = ["ntfy://topic", "json://127.0.0.1:1/h"]\nnotify_level = "warning"\n')
    cfg = load_user_config(env=env)
    assert cfg.urls == ("ntfy://topic", "json://127.0.0.1:1/h") and cfg.level == "warning"


@pytest.mark.parametrize(
    "text, problem",
    [
        ("notify = 3\n", "list of apprise URLs"),
        ('notify = [""]\n', "list of apprise URLs"),
        ('notify_level = "loud"\n', "unknown notify level"),
        ("notify_level = 2\n", "must be a string"),
        ("notify = [\n", "not valid TOML"),
    ],
)
def test_bad_user_config_names_the_file(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=problem) as err:
        load_user_config(path)
    assert str(path) in str(err.value)


def test_notice_is_a_value() -> None:
    n = Notice(kind="x", level="info", title="t", body="b")
    assert n.key is None
    with pytest.raises(AttributeError):
        n.title = "other"  # type: ignore[misc]


def test_a_folded_long_title_keeps_its_count(receiver) -> None:
    r = receiver("ok")
    n = Notifier([r.url()], fold_window_s=60)
    long_job = "j" * 200
    for _ in range(3):
        n.notify(events.notice("job_failed", "c", job=long_job, attempts=3, last_error="exit 1"))
    assert n.close(5)
    titles = [m["title"] for m in r.messages()]
    assert len(titles) == 2 and titles[1].endswith("(again, 2 more times)")
    assert all(len(t) <= events.TITLE_LIMIT for t in titles)
