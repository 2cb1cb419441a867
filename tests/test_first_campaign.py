"""The first real campaign's pieces (issue 29 item 7): the example campaign with jobs runs
headless against the simulator; its end prints the receipt (`rentwatch receipt`'s text) and
the folder its artifacts are in, which is the user data directory's unless the campaign names
one; the demo's campaign is a file shipped in the package."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tomllib
from importlib import resources
from pathlib import Path

from rentwatch.cli.main import main
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.run.dashboard import DEMO_CAMPAIGN

from .campaigns import cli_on_stepped_clock

EXAMPLE = Path(__file__).parent.parent / "examples" / "first-campaign.toml"


def _run(sim, tmp_path, campaign: Path, capsys, monkeypatch) -> tuple[int, str]:
    """`rentwatch run` as a newcomer types it (no `--headless`: a run is always without the TUI),
    its engine on the simulator's stepped clock: the market's time does not run on while a
    loaded box is slow to look (a host's image pull read as frozen, a host as dead)."""
    cli_on_stepped_clock(sim, monkeypatch)
    ledger = tmp_path / "l.duckdb"
    code = main(
        ["run", "--no-api", "--campaign", str(campaign), "--market-url", sim.url,
         "--api-key", sim.api_key, "--ledger", str(ledger), "--ssh-key", str(tmp_path / "id")]
    )  # fmt: skip
    return code, capsys.readouterr().out


def test_example_campaign_ends_with_its_receipt_and_artifacts_folder(
    make_sim, tmp_path, monkeypatch, capsys
):
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    monkeypatch.chdir(tmp_path / "..")  # the controller's working directory is not the data dir
    campaign = load_campaign(EXAMPLE.read_text(), str(EXAMPLE))
    assert len(campaign.jobs) >= 3 and campaign.artifacts_dir is None
    assert campaign.upload == ("finetune.py",)  # the user's code, pushed to each host
    sim = make_sim(seed=7, offers=60, stepped=True)
    code, out = _run(sim, tmp_path, EXAMPLE, capsys, monkeypatch)
    assert code == 0, out[-3000:]
    folder = data / "rentwatch" / "artifacts" / campaign.name
    assert out.rstrip().endswith(f"artifacts in {folder}"), out[-1500:]
    for job in campaign.jobs:
        got = folder / job.name / "out" / "result.json"
        assert got.is_file(), out[-4000:]
        result = json.loads(got.read_text())
        assert job.name.endswith(str(result["rank"]))
    # the script ran from the upload, which the ledger holds with each file's checksum
    script = hashlib.sha256((EXAMPLE.parent / "finetune.py").read_bytes()).hexdigest()
    with Ledger(tmp_path / "l.duckdb", read_only=True) as led:
        uploads = led.events(where="kind = 'uploaded'")
        kept = [r for r in led.instance_rows() if r["stopped_at"] and not r["destroyed_at"]]
    # the proven hosts are left stopped, and the end says what they bill and how to end them
    said = re.search(
        r"(\d+) stopped rental\(s\) still bill storage, \$[0-9.]+/day: rentwatch end "
        rf"--campaign {campaign.name} --ledger \S+ --market-url (\S+) --destroy",
        out,
    )
    assert kept and said and int(said.group(1)) == len(kept), out[-3000:]
    # pasted as it is, `end` reaches the market the campaign rented on (the simulator's)
    assert said.group(2) == sim.url.rstrip("/"), said.group(0)
    assert uploads and all([f["sha256"] for f in e.detail["files"]] == [script] for e in uploads), [
        e.detail for e in uploads
    ]
    # the receipt at the end is `rentwatch receipt`'s, to the character
    assert (
        main(["receipt", "--ledger", str(tmp_path / "l.duckdb"), "--campaign", campaign.name]) == 0
    )
    receipt = capsys.readouterr().out
    assert f"receipt: {campaign.name}" in receipt
    tail = out[: out.rindex("artifacts in ")]
    assert tail.endswith(receipt), (tail[-1500:], receipt)


def test_campaign_names_its_artifacts_folder(make_sim, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    text = EXAMPLE.read_text().replace(
        '# artifacts_dir = "~/finetune-out"', f'artifacts_dir = "{tmp_path / "mine"}"'
    )
    text = text.replace("fleet = 2", "fleet = 1")
    # its first job alone: where one job's artifacts land is where every job's do
    text = text[: text.index("[[jobs]]", text.index("[[jobs]]") + 1)]
    camp = tmp_path / "c.toml"
    camp.write_text(text)
    shutil.copy(EXAMPLE.parent / "finetune.py", tmp_path)  # its upload, beside it
    sim = make_sim(seed=7, offers=60, stepped=True)
    code, out = _run(sim, tmp_path, camp, capsys, monkeypatch)
    assert code == 0, out[-3000:]
    assert out.rstrip().endswith(f"artifacts in {tmp_path / 'mine' / 'first-finetune'}")
    assert (tmp_path / "mine" / "first-finetune" / "lora-r8" / "out" / "result.json").exists()
    assert not (tmp_path / "data").exists()


def test_demo_campaign_is_a_file_in_the_package():
    shipped = (resources.files("rentwatch.run") / "demo.toml").read_text(encoding="utf-8")
    assert shipped == DEMO_CAMPAIGN
    demo = load_campaign(shipped, "demo")
    assert demo.name == "demo" and len(demo.jobs) == 6
    pyproject = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert "*.toml" in pyproject["tool"]["setuptools"]["package-data"]["rentwatch.run"]
