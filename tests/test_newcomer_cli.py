"""The README's commands as a newcomer ran them (issue 29): `rentwatch offers` without --all
titled its table "40 fit of 40 offers" when the market had 60 (it counted the rows shown)."""

from __future__ import annotations

import json
import re
from importlib.metadata import version

import pytest
from rentwatch.cli.main import main

from tests.campaigns import campaign_text


def test_offers_title_counts_every_offer_found_not_only_the_fit(
    make_sim, tmp_path, capsys, monkeypatch
):
    sim = make_sim(seed=3, offers=30, time_scale=5)
    monkeypatch.setenv("VAST_API_KEY", sim.api_key)
    f = tmp_path / "c.toml"
    f.write_text(campaign_text(name="cnt", fleet=2).replace("max_dph = 0.60", "max_dph = 0.30"))
    base = ["offers", "--campaign", str(f), "--market-url", sim.url, "--ledger", str(f) + ".x"]
    assert main([*base, "--all", "--json"]) == 0
    every = json.loads(capsys.readouterr().out)
    fit = [r for r in every if r["rank"] is not None]
    assert 0 < len(fit) < len(every)  # some do not fit: the case the title got wrong
    assert main(base) == 0
    out = " ".join(capsys.readouterr().out.split())
    got = re.search(r"(\d+) fit of (\d+) offers", out)
    assert got and (int(got[1]), int(got[2])) == (len(fit), len(every)), out[:200]


def test_version_names_the_installed_distribution(capsys):
    """`rentwatch --version` answered with the top-level usage and exit 2; it now prints the
    version the installed package's metadata carries (pyproject.toml's, not a second copy)."""
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"rentwatch {version('rentwatch')}"
