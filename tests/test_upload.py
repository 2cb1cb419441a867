"""The campaign's `upload` (issue 29, item 7): the operator's files pushed into the job's
folder on each proven host before its first job there, checksummed in the ledger; symlinks
never followed; a missing path said before anything is rented."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest
from rentwatch.cli.commands import _read_campaign
from rentwatch.core.errors import ConfigError
from rentwatch.core.policy import get_policy
from rentwatch.ledger import Ledger
from rentwatch.market.factory import load_campaign
from rentwatch.run.host import run_headless

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
        load_campaign('upload = "src"\n' + campaign_text("up", 1))
    with pytest.raises(ConfigError, match="upload"):
        load_campaign('upload = [""]\n' + campaign_text("up", 1))


# The upload rule (issue 45, item 15): a shared campaign file pushed rentwatch's own SSH key
# to a stranger's host with `upload = ["../../…/id_ed25519"]`.


def _camp(folder, *uploads: str):
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "c.toml"
    f.write_text(f"upload = {list(uploads)!r}\n".replace("'", '"') + campaign_text("up", 1))
    return f


def _refused(f, match: str, **kw) -> str:
    with pytest.raises(ConfigError, match=match) as e:
        _read_campaign(str(f), **kw)
    return str(e.value)


def test_uploads_resolve_inside_the_campaigns_folder(tmp_path):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key = home / ".ssh" / "id_ed25519"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("not the campaign's")
    camp = home / "work" / "sweep"
    camp.mkdir(parents=True)
    (camp / "train.py").write_text("print(1)\n")

    # a `..` escape, an absolute path outside, each named in the error
    msg = _refused(_camp(camp, "train.py", "../../.ssh/id_ed25519"), "outside the upload root")
    assert "../../.ssh/id_ed25519" in msg and "c.toml" in msg
    _refused(_camp(camp, str(elsewhere)), "outside the upload root")
    # symlinks resolved: a link to a folder outside, and a path through it
    (camp / "out").symlink_to(home / ".ssh")
    _refused(_camp(camp, "out"), "symlink")
    _refused(_camp(camp, "out/id_ed25519"), "outside the upload root")
    # an absolute path inside is the same file as its relative name
    ok = _read_campaign(str(_camp(camp, str(camp / "train.py"))))
    assert ok.upload == (str((camp / "train.py").resolve()),)


def test_no_dotfile_and_no_key_is_uploaded(tmp_path):
    camp = tmp_path / "camp"
    (camp / ".ssh").mkdir(parents=True)
    (camp / ".ssh" / "config").write_text("Host *\n")
    (camp / ".env").write_text("TOKEN=1\n")
    _refused(_camp(camp, ".ssh/config"), r"hidden \(\.ssh\)")
    _refused(_camp(camp, ".env"), "hidden")
    (camp / "x").mkdir()
    _refused(_camp(camp, "x/../.env"), "hidden")
    # a key under any name, found by what it says it is
    (camp / "deploy.txt").write_text("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n")
    _refused(_camp(camp, "deploy.txt"), "deploy.txt is a private key")
    # a key inside an uploaded folder refuses the folder
    (camp / "src").mkdir()
    (camp / "src" / "a.py").write_text("print(1)\n")
    (camp / "src" / "id_ecdsa").write_text("whatever the content\n")
    _refused(_camp(camp, "src"), "id_ecdsa is a private key")
    (camp / "src" / "id_ecdsa").unlink()
    # rentwatch's own key, whatever it holds, named by --ssh-key
    (camp / "mine").write_text("not armoured\n")
    _refused(_camp(camp, "mine"), "mine is a private key", ssh_key=str(camp / "mine"))
    # dotfiles inside an uploaded folder are not sent
    (camp / "src" / ".env").write_text("TOKEN=2\n")
    (camp / "src" / ".git").mkdir()
    (camp / "src" / ".git" / "config").write_text("x\n")
    ok = _read_campaign(str(_camp(camp, "src", "src/a.py")))
    from rentwatch.engine.jobs.upload import local_files

    assert [rel for _, rel in local_files(ok.upload)] == ["src/a.py", "a.py"]


def test_upload_root_names_another_folder(tmp_path, capsys):
    from rentwatch.cli.main import main

    repo = tmp_path / "repo"
    (repo / "lib").mkdir(parents=True)
    (repo / "lib" / "m.py").write_text("x = 1\n")
    f = _camp(repo / "campaigns", "../lib")
    _refused(f, "outside the upload root")
    ok = _read_campaign(str(f), upload_root=str(repo))
    assert ok.upload == (str((repo / "lib").resolve()),)
    # the command line says it in one line, exit 2, before any market is asked
    code = main(["run", "--headless", "--campaign", str(f), "--market-url", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 2 and "../lib" in err and "outside the upload root" in err
    assert "Traceback" not in err


def test_a_key_put_in_place_after_the_check_is_not_pushed(tmp_path):
    # the rule is checked again as each file is read: a file swapped for a key since the
    # campaign was read is refused, and nothing of it is written on the host
    from rentwatch.engine.jobs.upload import UploadError, push_uploads

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("print(1)\n")
    f = _camp(tmp_path, "src")
    camp = _read_campaign(str(f))
    (tmp_path / "src" / "a.py").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n")
    written: list[bytes] = []

    class File:
        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

        async def write(self, data: bytes) -> None:
            written.append(data)

    class Sftp:
        async def makedirs(self, *a, **k) -> None:
            pass

        def open(self, *a, **k):
            return File()

        def exit(self) -> None:
            pass

    class Conn:
        async def start_sftp_client(self):
            return Sftp()

    with pytest.raises(UploadError, match="a.py is a private key"):
        asyncio.run(push_uploads(Conn(), camp.upload, "/w"))  # type: ignore[arg-type]
    assert written == []
