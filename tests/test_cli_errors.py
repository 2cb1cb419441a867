"""Ordinary mistakes get one clear line on stderr and exit 2, never a traceback: files that
cannot be read or are not UTF-8, a market that does not answer, a rejected key, a ledger that
cannot be created or is not a ledger, an SSH key path that cannot hold a key, bad numbers."""

from __future__ import annotations

import pytest
from rentwatch.cli.main import main
from rentwatch.market.vast.transport import Transport

from tests.campaigns import campaign_text

KEY = "cli-errors-key-9f8e7d"


def _one_line(capsys, needle: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if not ln.startswith("rentwatch: warning:")]
    assert "Traceback" not in err, err
    assert len(lines) == 1, err
    assert needle in lines[0], lines[0]
    assert KEY not in err
    return lines[0]


def _campaign(tmp_path) -> str:
    path = tmp_path / "c.toml"
    path.write_text(campaign_text("errs", 1))
    return str(path)


def _run(tmp_path, campaign: str, url: str, *extra: str) -> list[str]:
    return [
        "run",
        "--headless",
        "--campaign",
        campaign,
        "--market-url",
        url,
        "--ledger",
        str(tmp_path / "l.duckdb"),
        "--ssh-key",
        str(tmp_path / "id"),
        *extra,
    ]


@pytest.fixture
def no_env_key(monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", KEY)


def test_non_utf8_campaign(tmp_path, capsys, no_env_key):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    assert main(_run(tmp_path, str(bad), "http://127.0.0.1:9")) == 2
    _one_line(capsys, "not UTF-8")
    assert not (tmp_path / "l.duckdb").exists()  # nothing recorded for a campaign never read


def test_broken_campaign_toml(tmp_path, capsys, no_env_key):
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x\n[[jobs]\n')
    assert main(_run(tmp_path, str(bad), "http://127.0.0.1:9")) == 2
    _one_line(capsys, "bad.toml")


@pytest.mark.parametrize("command", ["watch", "referee"])
def test_missing_campaign_file(tmp_path, capsys, no_env_key, command):
    assert main([command, "--campaign", str(tmp_path / "missing.toml")]) == 2
    _one_line(capsys, "cannot read campaign")


@pytest.mark.parametrize("command", ["sim", "referee"])
def test_non_utf8_scenario(tmp_path, capsys, command):
    bad = tmp_path / "s.toml"
    bad.write_bytes(b"seed = 7 # \xff\n")
    assert main([command, "--scenario", str(bad)]) == 2
    _one_line(capsys, "not UTF-8")


def test_unreachable_market_in_headless_mode(tmp_path, capsys, no_env_key, monkeypatch):
    # every retry still made, each after a millisecond, not the 0.15 s doubling (about 5 s)
    monkeypatch.setitem(Transport.__init__.__kwdefaults__, "backoff", 0.001)
    assert main(_run(tmp_path, _campaign(tmp_path), "http://127.0.0.1:9")) == 2
    _one_line(capsys, "cannot reach the market at http://127.0.0.1:9 (network: connection refused)")


def test_wrong_key_in_headless_mode(tmp_path, capsys, make_sim, no_env_key):
    sim = make_sim(api_key="the-right-one", offers=3)
    assert main(_run(tmp_path, _campaign(tmp_path), sim.url)) == 2
    line = _one_line(capsys, "rejected the API key")
    assert "the-right-one" not in line


def test_ledger_that_cannot_be_created(tmp_path, capsys, make_sim, no_env_key):
    sim = make_sim(api_key=KEY, offers=3)
    camp = _campaign(tmp_path)
    args = _run(tmp_path, camp, sim.url)
    args[args.index("--ledger") + 1] = f"{camp}/inside-a-file/l.duckdb"  # parent is a file
    assert main(args) == 2
    _one_line(capsys, "cannot create")


def test_ssh_key_path_that_cannot_hold_a_key(tmp_path, capsys, make_sim, no_env_key):
    sim = make_sim(api_key=KEY, offers=3)
    camp = _campaign(tmp_path)
    args = _run(tmp_path, camp, sim.url)
    args[args.index("--ssh-key") + 1] = f"{camp}/id"
    assert main(args) == 2
    _one_line(capsys, "SSH key")
    garbage = tmp_path / "garbage_key"
    garbage.write_text("not a key")
    args[args.index("--ssh-key") + 1] = str(garbage)
    assert main(args) == 2
    _one_line(capsys, "SSH key")


@pytest.mark.parametrize(
    "args",
    [
        ["ledger", "--ledger", "{d}/missing.duckdb", "select 1"],
        ["ledger", "--ledger", "{d}", "select 1"],
        ["ledger", "--ledger", "{d}/not.duckdb", "select 1"],
        ["receipt", "--ledger", "{d}/not.duckdb"],
        ["scenario", "from-ledger", "--ledger", "{d}/missing.duckdb"],
    ],
)
def test_ledger_paths_that_are_not_ledgers(tmp_path, capsys, args):
    (tmp_path / "not.duckdb").write_text("hello")
    assert main([a.replace("{d}", str(tmp_path)) for a in args]) == 2
    _one_line(capsys, "ledger error")


def test_export_to_a_place_that_cannot_be_written(tmp_path, capsys):
    from rentwatch.ledger import Ledger

    Ledger(tmp_path / "l.duckdb").close()
    base = ["ledger", "--ledger", str(tmp_path / "l.duckdb"), "select 1 x", "--export"]
    assert main([*base, str(tmp_path / "nodir" / "x.csv")]) == 2
    _one_line(capsys, "cannot write")
    assert main([*base, str(tmp_path / "x.txt")]) == 2
    _one_line(capsys, ".csv or .parquet")


@pytest.mark.parametrize(
    "args",
    [
        ["ledger", "--limit", "0", "select 1"],
        ["ledger", "--limit", "x", "select 1"],
        ["demo", "--time-scale", "-1"],
        ["demo", "--time-scale", "nan"],
        ["referee", "--seeds", "0"],
        ["referee", "--family", "0"],  # it ran nine runs of the article's market instead
        ["referee", "--family", "-3"],
    ],
)
def test_bad_numbers_are_usage_errors(capsys, args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_sim_on_a_port_already_taken(capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["sim", "--port", str(port)]) == 2
    _one_line(capsys, "cannot start the simulated market")
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--port", "99999"])
    assert exc.value.code == 2


def test_a_reader_that_goes_away_costs_no_traceback(tmp_path):
    """`rentwatch ledger ... | head -1` and `rentwatch ls --json | grep -q`: the reader
    stops reading; the command ends quietly (141, as a shell tool killed by SIGPIPE)."""
    import subprocess
    import sys

    from rentwatch.ledger import Ledger

    ledger = tmp_path / "l.duckdb"
    Ledger(ledger).close()
    cmd = [sys.executable, "-m", "rentwatch", "ledger", "--ledger", str(ledger), "--csv"]
    cmd.append("select range as n, repeat('x', 200) as pad from range(200000)")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(60) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["receipt", "--nosuch"], "usage: rentwatch receipt "),
        (["scenario", "from-ledger", "--zzz"], "usage: rentwatch scenario from-ledger "),
        (["--zzz"], "usage: rentwatch [-h]"),
    ],
)
def test_a_flag_a_command_does_not_know_shows_that_commands_usage(argv, usage, capsys):
    """`rentwatch receipt --nosuch` printed the top level's usage, which lists no flag of
    `receipt`: the error now comes from the command that was given the flag."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(usage) and f"unrecognized arguments: {argv[-1]}" in err


def test_csv_on_standard_output_ends_lines_as_the_terminal_does(tmp_path, capsys):
    """`rentwatch ledger --csv ... | cut -d, -f2` got "x\\r": csv's RFC line ending on a
    terminal's pipe. The file export (`--export x.csv`) keeps RFC 4180's CRLF."""
    from rentwatch.ledger import Ledger

    ledger = tmp_path / "l.duckdb"
    Ledger(ledger).close()
    assert main(["ledger", "--ledger", str(ledger), "--csv", "select 1 as a, 'x' as b"]) == 0
    assert capsys.readouterr().out == "a,b\n1,x\n"
