"""A market that cannot be used reads as one line naming its address and the cause (network,
key, refused), from `run --headless`, `watch`, the controller of `watch`/`demo` and `offers`;
the start that fails so leaves no ledger, log or SSH key behind (issue 29 item 5)."""

from __future__ import annotations

import pytest
from rentwatch.cli.main import main
from rentwatch.market.errors import ApiError, MarketUnavailable
from rentwatch.market.reach import market_failure
from rentwatch.market.vast.transport import Transport

from tests.campaigns import campaign_text
from tests.conftest import free_port

KEY = "reach-key-5a4b3c"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user of their own: the data directory (default ledger and SSH key) under tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / "data"))
    monkeypatch.setenv("VAST_API_KEY", KEY)
    # every retry still made, each after a millisecond, not the 0.15 s doubling (about 5 s in
    # all): the line said at the end is what these tests check, not the wait before it
    monkeypatch.setitem(Transport.__init__.__kwdefaults__, "backoff", 0.001)
    camp = tmp_path / "c.toml"
    camp.write_text(campaign_text("reach", 1))
    return camp


def _made(tmp_path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())


def _line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if not ln.startswith("rentwatch: warning:")]
    assert "Traceback" not in err and len(lines) == 1, err
    assert KEY not in err
    return lines[0]


def _commands(url: str, camp, tmp_path) -> dict[str, list[str]]:
    ledger = str(tmp_path / "out" / "l.duckdb")
    return {
        "headless": ["run", "--headless", "--campaign", str(camp), "--market-url", url,
                     "--ledger", ledger, "--ssh-key", str(tmp_path / "out" / "id")],
        "watch": ["watch", "--campaign", str(camp), "--market-url", url, "--ledger", ledger],
        "controller": ["controller", "--campaign", str(camp), "--market-url", url,
                       "--ledger", ledger, "--ssh-key", str(tmp_path / "out" / "id")],
        "offers": ["offers", "--campaign", str(camp), "--market-url", url, "--ledger", ledger],
    }  # fmt: skip


@pytest.mark.parametrize("command", ["headless", "watch", "controller", "offers"])
def test_unreachable_market_is_one_line_and_leaves_nothing(tmp_path, capsys, home, command):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    before = _made(tmp_path)
    assert main(_commands(url, home, tmp_path)[command]) == 2
    assert (
        _line(capsys)
        == f"rentwatch: cannot reach the market at {url} (network: connection refused)"
    )
    assert _made(tmp_path) == before  # no ledger, no log, no SSH key (neither given nor default)


@pytest.mark.parametrize("command", ["headless", "watch", "offers"])
def test_refused_key_names_the_market_and_the_key(tmp_path, capsys, home, make_sim, command):
    sim = make_sim(api_key="the-right-one", offers=3)
    before = _made(tmp_path)
    assert main(_commands(sim.url, home, tmp_path)[command]) == 2
    line = _line(capsys)
    assert line.startswith(f"rentwatch: cannot use the market at {sim.url} (key: "), line
    assert "rejected the API key" in line and "the-right-one" not in line
    assert _made(tmp_path) == before


def test_causes_in_words():
    url = "http://m"
    refused = market_failure(url, ApiError(404, "not_found", "no such page"))
    assert (
        str(refused) == "cannot use the market at http://m (refused: 404 not_found: no such page)"
    )
    down = MarketUnavailable("GET /x failed after 6 attempts: 503 ...")
    assert "(unavailable: GET /x failed" in str(market_failure(url, down))
    down.network = "name not resolved"
    assert str(market_failure(url, down)) == (
        "cannot reach the market at http://m (network: name not resolved)"
    )
