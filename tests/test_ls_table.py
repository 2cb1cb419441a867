"""`rentwatch ls` prints each controller's socket whole, however narrow the terminal: it is
what `rentwatch attach --socket` and an SSH forward take (docs/service.md). At 120 columns it
was cut with an ellipsis; only `--json` had it."""

from __future__ import annotations

import argparse

import pytest
from rentwatch.cli import controllers

SOCKET = "/home/someone/.local/share/rentwatch/demo-ledger.duckdb.sock-with-a-long-tail-0123456789"


@pytest.mark.parametrize("width", ["80", "120"])
def test_the_socket_and_campaign_are_never_cut(monkeypatch, capsys, width):
    monkeypatch.setenv("COLUMNS", width)
    row = {
        "campaign": "first-finetune-on-a-long-name",
        "pid": 4242,
        "uptime_s": 3700.0,
        "in_service": 2,
        "fleet": 3,
        "held": 3,
        "spent_usd": 1.25,
        "dph": 0.4,
        "socket": SOCKET,
    }
    monkeypatch.setattr(controllers, "ls_rows", lambda: [row])
    assert controllers.cmd_ls(argparse.Namespace(json=False)) == 0
    out = capsys.readouterr().out
    assert "…" not in out
    body = [line for line in out.splitlines() if line.count("│") >= 2]
    socket = "".join(line.split("│")[-2].strip() for line in body)
    campaign = "".join(line.split("│")[1].strip() for line in body)
    assert SOCKET in socket, out
    assert row["campaign"] in campaign, out
