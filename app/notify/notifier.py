"""Delivery of notices through apprise URLs, off the engine's path, and the user's config file.

`notify` never blocks nor raises: it filters by level and queues (a full queue drops and counts).
One thread sends, each send bounded by `deadline_s`; a refused send is retried with backoff, a
hanging one given up at once. Repeats of a `key` within `fold_window_s` are folded into one
notice at the window's end. Every title and body is scrubbed before it is sent."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import apprise

from ..core.errors import ConfigError, ConfigErrors
from .events import (
    DEFAULT_MIN_LEVEL,
    TITLE_LIMIT,
    Notice,
    level_rank,
    scrub,
    should_send,
)
from .wording import cap, plural

log = logging.getLogger(__name__)

OnFailure = Callable[[str, str], None]

_APPRISE_TYPES = {
    "info": apprise.NotifyType.INFO,
    "notice": apprise.NotifyType.SUCCESS,
    "warning": apprise.NotifyType.WARNING,
    "critical": apprise.NotifyType.FAILURE,
}
# a send still running after its deadline keeps its thread; past this many per URL, the URL is
# failed at once instead of piling up threads behind a receiver that never answers
_MAX_STUCK_PER_URL = 2


@dataclass
class _Fold:
    until: float
    repeats: int = 0
    last: Notice | None = None


@dataclass
class _Target:
    url_redacted: str
    apprise_obj: apprise.Apprise | None
    stuck: list[threading.Thread] = field(default_factory=list)


class Notifier:
    """Sends notices to apprise URLs from a background thread. Counters, read from any thread:
    `sent`, `failures` (per URL), `dropped`, `filtered`, `folded`."""

    def __init__(
        self,
        urls: Iterable[str],
        min_level: str = DEFAULT_MIN_LEVEL,
        secrets: Iterable[str | None] = (),
        on_failure: OnFailure | None = None,
        *,
        queue_size: int = 100,
        deadline_s: float = 5.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        fold_window_s: float = 60.0,
    ) -> None:
        level_rank(min_level)
        self.min_level = min_level
        self._secrets = tuple(s for s in secrets if s)
        self._on_failure = on_failure
        self._deadline_s = deadline_s
        self._retries = max(0, retries)
        self._backoff_s = backoff_s
        self._fold_window_s = fold_window_s
        self._queue: queue.Queue[Notice | None] = queue.Queue(maxsize=queue_size)
        self._folds: dict[str, _Fold] = {}
        self._closing = threading.Event()
        self._lock = threading.Lock()
        self.sent = 0
        self.failures = 0
        self.dropped = 0
        self.filtered = 0
        self.folded = 0
        self._targets = [self._target(url) for url in dict.fromkeys(urls)]
        self._thread = threading.Thread(target=self._run, name="rentwatch-notifier", daemon=True)
        self._thread.start()

    def notify(self, notice: Notice) -> bool:
        """Queue `notice` for delivery; False when it was filtered, dropped or the notifier is
        closed. Never blocks, never raises."""
        try:
            if not self._targets or self._closing.is_set():
                return False
            if not should_send(notice, self.min_level):
                with self._lock:
                    self.filtered += 1
                return False
            self._queue.put_nowait(notice)
            return True
        except queue.Full:
            with self._lock:
                self.dropped += 1
            return False
        except Exception:  # an unknown level in a notice must not reach the engine
            log.exception("notice refused")
            return False

    def close(self, timeout: float = 10.0) -> bool:
        """Send what is queued (folded repeats included), then stop; True when it drained in
        `timeout` seconds. Sends still running after it are abandoned (daemon threads)."""
        self._closing.set()
        end = time.monotonic() + timeout
        while self._thread.is_alive():
            try:
                self._queue.put(None, timeout=0.05)
                break
            except queue.Full:
                if time.monotonic() >= end:
                    break
        self._thread.join(max(0.0, end - time.monotonic()))
        return not self._thread.is_alive()

    # the sending thread

    def _run(self) -> None:
        while True:
            try:
                item = self._queue.get(timeout=self._next_wait())
            except queue.Empty:
                self._flush_folds(force=False)
                continue
            if item is None:  # close()'s sentinel: what is queued before it was sent
                self._flush_folds(force=True)
                return
            self._take(item)
            self._flush_folds(force=False)

    def _next_wait(self) -> float:
        if not self._folds:
            return 1.0
        soonest = min(f.until for f in self._folds.values())
        return max(0.01, min(1.0, soonest - time.monotonic()))

    def _take(self, notice: Notice) -> None:
        now = time.monotonic()
        if notice.key is None or self._fold_window_s <= 0:
            self._send(notice)
            return
        fold = self._folds.get(notice.key)
        if fold is not None and now < fold.until:
            fold.repeats += 1
            fold.last = notice
            with self._lock:
                self.folded += 1
            return
        self._folds[notice.key] = _Fold(until=now + self._fold_window_s)
        self._send(notice)

    def _flush_folds(self, *, force: bool) -> None:
        now = time.monotonic()
        for key, fold in list(self._folds.items()):
            if not force and now < fold.until:
                continue
            del self._folds[key]
            if fold.last is not None:
                self._send(_folded(fold.last, fold.repeats))

    def _send(self, notice: Notice) -> None:
        title = scrub(notice.title, self._secrets, limit=TITLE_LIMIT).replace("\n", " ")
        body = scrub(notice.body, self._secrets)
        for target in self._targets:
            reason = self._deliver(target, title, body, notice.level)
            with self._lock:
                if reason is None:
                    self.sent += 1
                else:
                    self.failures += 1
            if reason is not None:
                self._report(target.url_redacted, reason)

    def _deliver(self, target: _Target, title: str, body: str, level: str) -> str | None:
        """None when delivered; else why not (after the retries it was allowed)."""
        if target.apprise_obj is None:
            return "not a URL apprise can send to"
        obj = target.apprise_obj

        def send_once(outcome: list[bool | BaseException]) -> None:
            try:
                outcome.append(
                    bool(
                        obj.notify(
                            title=title,
                            body=body,
                            notify_type=_APPRISE_TYPES[level],
                            body_format=apprise.NotifyFormat.TEXT,
                            interpret_escapes=False,
                        )
                    )
                )
            except BaseException as exc:  # noqa: BLE001 - reported as the send's failure
                outcome.append(exc)

        reason = "refused"
        for attempt in range(self._retries + 1):
            if attempt:
                if self._closing.is_set() and attempt > 1:
                    break
                time.sleep(self._backoff_s * 2 ** (attempt - 1))
            target.stuck = [t for t in target.stuck if t.is_alive()]
            if len(target.stuck) >= _MAX_STUCK_PER_URL:
                return f"{len(target.stuck)} earlier sends still unanswered"
            outcome: list[bool | BaseException] = []
            worker = threading.Thread(
                target=send_once, args=(outcome,), name="rentwatch-notify-send", daemon=True
            )
            worker.start()
            worker.join(self._deadline_s)
            if worker.is_alive():
                target.stuck.append(worker)
                return f"no answer in {self._deadline_s:g}s"
            result = outcome[0] if outcome else False
            if result is True:
                return None
            reason = (
                f"error: {type(result).__name__}"
                if isinstance(result, BaseException)
                else "refused"
            )
        return f"{reason} after {self._retries + 1} tries"

    def _report(self, url_redacted: str, reason: str) -> None:
        if self._on_failure is None:
            return
        try:
            self._on_failure(url_redacted, scrub(reason, self._secrets, limit=200))
        except Exception:
            log.exception("on_failure callback raised")

    def _target(self, url: str) -> _Target:
        obj = apprise.Apprise()
        usable = obj if obj.add(url) else None
        return _Target(url_redacted=_redact_url(url, usable), apprise_obj=usable)


def _folded(notice: Notice, repeats: int) -> Notice:
    """The repeats after the first (which went out at once) as one notice."""
    more = plural(repeats, "more time")
    suffix = f" (again, {more})"
    title = cap(notice.title, TITLE_LIMIT - len(suffix)) + suffix
    body = f"{notice.body}\n(The same news came {more} inside the fold window.)"
    return replace(notice, title=title, body=body)


def _redact_url(url: str, obj: apprise.Apprise | None) -> str:
    """The URL without credentials or query: apprise's privacy form, else only the scheme."""
    if obj is not None and len(obj) > 0:
        with contextlib.suppress(Exception):
            private_url: Callable[..., object] = obj[0].url
            return str(private_url(privacy=True)).split("?", 1)[0]
    scheme = url.split("://", 1)[0] if "://" in url else "?"
    return f"{scrub(scheme, limit=20)}://…"


# the user's config file


@dataclass(frozen=True)
class UserNotifyConfig:
    """The notification defaults of the user's config file."""

    urls: tuple[str, ...] = ()
    level: str = DEFAULT_MIN_LEVEL


def user_config_path(env: Mapping[str, str] | None = None) -> Path:
    """`$XDG_CONFIG_HOME/rentwatch/config.toml`, or `~/.config/rentwatch/config.toml` when the
    variable is unset, empty or not absolute (as the XDG spec says)."""
    env = os.environ if env is None else env
    base = env.get("XDG_CONFIG_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".config"
    return root / "rentwatch" / "config.toml"


def read_user_config(path: Path) -> dict[str, Any] | None:
    """The user's config file as TOML (every section: `notify`, `[team]`); None when there is
    none; ConfigError naming the file when it cannot be read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def load_user_config(
    path: Path | None = None, env: Mapping[str, str] | None = None
) -> UserNotifyConfig:
    """The user's defaults for every campaign: `notify` (apprise URLs) and `notify_level` in
    `$XDG_CONFIG_HOME/rentwatch/config.toml` (default `~/.config/rentwatch/config.toml`). The
    URLs add to the campaign's and `--notify`; the campaign's own level wins. A missing file
    gives the defaults; a bad one raises ConfigError naming the file."""
    path = user_config_path(env) if path is None else path
    data = read_user_config(path)
    if data is None:
        return UserNotifyConfig()
    problems: list[str] = []  # both said at once
    urls = data.get("notify", [])
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not all(isinstance(u, str) and u.strip() for u in urls):
        problems.append(f"{path}: `notify` must be a list of apprise URLs (strings)")
    level = data.get("notify_level", DEFAULT_MIN_LEVEL)
    if not isinstance(level, str):
        problems.append(f"{path}: `notify_level` must be a string")
    else:
        try:
            level_rank(level)
        except ValueError as exc:
            problems.append(f"{path}: {exc}")
    if problems:
        raise ConfigErrors(str(path), problems)
    return UserNotifyConfig(urls=tuple(u.strip() for u in urls), level=level)
