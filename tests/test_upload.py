"""The campaign's `upload` (issue 29, item 7): the operator's files pushed into the job's
folder on each proven host before its first job there, checksummed in the ledger; symlinks
never followed; a missing path said before anything is rented."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest
from rentwatch.cli.commands import _read_campaign
from rentwatch.core.campaign import parse_campaign
from rentwatch.core.errors import ConfigError
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.run.headless import run_headless

from tests.campaigns import campaign_text

JOB = """
[[jobs]]
name = "check"
run = "mkdir -p out && sha256sum train.py src/a.txt src/sub/b.txt > out/sums.txt && (test -e src/link || echo nolink >> out/sums.txt)"
artifacts = ["out/sums.txt"]
"""


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_uploads_reach_the_host_checksummed_and_links_are_not_followed(make_sim, tmp_path):
    sim = make_sim(
        seed=7, offers=20, time_scale=240, host_class=[{"behaviour": "healthy", "share": 1}]
    )
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "a.txt").write_text("alpha\n")
    (tmp_path / "src" / "sub" / "b.txt").write_bytes(os.urandom(300_000))
    (tmp_path / "src" / "link").symlink_to("/etc/passwd")
    (tmp_path / "train.py").write_text("print('train')\n")
    text = campaign_text("up", 1, JOB).replace(
        'artifacts_dir = "artifacts"', f'artifacts_dir = "{tmp_path / "art"}"'
    )
    camp_file = tmp_path / "c.toml"
    camp_file.write_text('upload = ["src", "train.py"]\n' + text)
    campaign = _read_campaign(str(camp_file))
    assert campaign.upload == (str(tmp_path / "src"), str(tmp_path / "train.py"))
    ledger = tmp_path / "l.duckdb"
    code = asyncio.run(
        run_headless(
            campaign, get_policy("default"), sim.url, sim.api_key, str(ledger),
            key_path=str(tmp_path / "key"),
        )
    )  # fmt: skip
    assert code == 0
    led = Ledger(ledger)
    (up,) = led.events(where="kind = 'uploaded'")
    sent = {f["path"]: f["sha256"] for f in up.detail["files"]}
    want = {
        "train.py": sha(tmp_path / "train.py"),
        "src/a.txt": sha(tmp_path / "src" / "a.txt"),
        "src/sub/b.txt": sha(tmp_path / "src" / "sub" / "b.txt"),
    }
    assert sent == want, "the link was sent, or a file is missing"
    sums = next((tmp_path / "art").rglob("sums.txt")).read_text().split("\n")
    on_host = {ln.split()[1]: ln.split()[0] for ln in sums if len(ln.split()) == 2}
    assert on_host == want and "nolink" in sums, "what the job read is what was sent"
    started = led.events(where="kind = 'job_started'")
    assert up.seq < started[0].seq and up.instance_id == started[0].instance_id


def test_a_missing_upload_is_said_before_anything_is_rented(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('upload = ["nope", "c.toml"]\n' + campaign_text("up", 1))
    with pytest.raises(ConfigError, match="upload: no such file or folder: .*nope"):
        _read_campaign(str(f))
    with pytest.raises(ConfigError, match="upload"):
        parse_campaign('upload = "src"\n' + campaign_text("up", 1))
    with pytest.raises(ConfigError, match="upload"):
        parse_campaign('upload = [""]\n' + campaign_text("up", 1))
