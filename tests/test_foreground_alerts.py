"""`watch --foreground` and `demo --foreground` run the engine inside the dashboard's process:
it notifies (`--notify`, the user's config) and serves `--metrics` while the dashboard runs, as a
controller's engine does; a `--metrics` that cannot be served is refused, never ignored."""

from __future__ import annotations

import asyncio
import socket
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rentwatch.cli.main import main
from rentwatch.widgets.app import RentwatchApp

from .campaigns import campaign_text
from .conftest import free_port
from .test_alerts import receiver  # noqa: F401 (the fixture)
from .test_dashboard import _until


def _scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
            return str(r.read().decode())
    except OSError:
        return None


@pytest.fixture
def home(tmp_path, monkeypatch):
    """The user's folders in `tmp_path`: their SSH key, data and notify config."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def _dashboard_until(monkeypatch, done, seen: list[RentwatchApp]) -> None:
    """The dashboard's `run` headless: it runs until `done()` says so, then ends with `stop`
    without its quit dialog (as a crash would); `seen` gets the app."""

    def run(app: RentwatchApp, *args: object, **kwargs: object) -> str:
        async def drive() -> None:
            async with app.run_test(size=(120, 36)) as pilot:
                await _until(pilot, lambda: app.latest is not None and done(), timeout=120)
                seen.append(app)

        asyncio.run(drive())
        return "stop"

    monkeypatch.setattr(RentwatchApp, "run", run)


def test_watch_foreground_notifies_and_serves_metrics(make_sim, home, receiver, monkeypatch):  # noqa: F811
    sim = make_sim(
        seed=7, offers=40, time_scale=240, host_class=[{"behaviour": "healthy", "share": 1.0}]
    )
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    campaign = home / "c.toml"
    campaign.write_text(campaign_text("fg", 1))
    port = free_port()
    scraped: list[str] = []

    def answered() -> bool:
        text = _scrape(port)
        if text and "rentwatch_instances" in text:
            scraped.append(text)
        return bool(scraped)

    seen: list[RentwatchApp] = []
    _dashboard_until(monkeypatch, answered, seen)
    code = main(
        [
            "watch",
            "--foreground",
            "--market-url",
            sim.url,
            "--campaign",
            str(campaign),
            "--ledger",
            str(home / "l.duckdb"),
            "--notify",
            receiver.url,
            "--metrics",
            f"127.0.0.1:{port}",
        ]
    )
    assert code == 0 and len(seen) == 1
    # its engine's stream ended with it: left reconnecting, it took another test's patches
    assert not seen[0].engine.alive()
    families = {f.name for f in text_string_to_metric_families(scraped[-1])}
    assert "rentwatch_poll_duration_seconds" in families
    assert _scrape(port) is None  # the server ended with the dashboard
    # the run's end told, as a controller's end is: the campaign's receipt
    ends = [n for n in receiver.got if "spent" in n["title"]]
    assert len(ends) == 1, receiver.got
    assert sim.api_key not in str(receiver.got)


def test_demo_foreground_notifies_the_users_config(home, receiver, monkeypatch):  # noqa: F811
    config = home / "config" / "rentwatch" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'notify = ["{receiver.url}"]\n')
    seen: list[RentwatchApp] = []
    _dashboard_until(monkeypatch, lambda: True, seen)
    code = main(["demo", "--foreground", "--ledger", str(home / "demo.duckdb")])
    assert code == 0 and len(seen) == 1 and not seen[0].engine.alive()
    assert [n for n in receiver.got if "spent" in n["title"]], receiver.got


def test_watch_foreground_refuses_metrics_it_cannot_serve(make_sim, home, monkeypatch, capsys):
    sim = make_sim(seed=7, offers=10, time_scale=240)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    seen: list[RentwatchApp] = []
    _dashboard_until(monkeypatch, lambda: True, seen)
    base = ["watch", "--foreground", "--market-url", sim.url, "--ledger", str(home / "l.duckdb")]
    # not a HOST:PORT: said before anything starts
    assert main([*base, "--metrics", "127.0.0.1:http"]) == 2
    assert "--metrics" in capsys.readouterr().err
    assert not (home / "l.duckdb").exists()
    # a port in use: the engine that started is ended, and the error said; no dashboard
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main([*base, "--metrics", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "alerts could not start" in err, err
    assert seen == []
    assert not [t for t in threading.enumerate() if t.name == "rentwatch-engine"]
