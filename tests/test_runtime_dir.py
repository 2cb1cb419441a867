"""A shared runtime directory is refused (issue 30, item 10): one another user owns or may
write could hold their registry entry pointing at their own socket, which `ls` would list,
`ledger` send the SQL to and `attach` drive. Entries and sockets not the user's are skipped."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from rentwatch.run.service import registry
from rentwatch.run.service.registry import Entry, UnsafeRuntimeDir

from .cli_run import run_cli


def test_a_runtime_dir_others_can_write_is_refused_with_a_clear_error(runtime):
    runtime.mkdir(parents=True, exist_ok=True)
    os.chmod(runtime, 0o777)
    with pytest.raises(UnsafeRuntimeDir, match="written by others.*chmod 700"):
        registry.live_entries()
    out = run_cli("ls")  # an error it did not catch would raise here
    assert out.returncode != 0 and "refusing the runtime directory" in out.stderr
    assert "Traceback" not in out.stderr
    os.chmod(runtime, 0o700)
    assert registry.live_entries() == []


def test_a_runtime_dir_of_another_user_is_refused(runtime, monkeypatch):
    runtime.mkdir(parents=True, exist_ok=True)
    mine = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: mine + 4242)
    with pytest.raises(UnsafeRuntimeDir, match="not to you"):
        registry.runtime_dir()


def _serve(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(4)
    return s


@pytest.mark.skipif(os.getuid() != 0, reason="planting another user's files needs chown")
def test_an_entry_or_a_socket_planted_by_another_user_is_not_listed(runtime, tmp_path):
    entries = runtime / "controllers"
    entries.mkdir(parents=True, exist_ok=True)
    pid = os.getpid()  # a live process, as a real planted entry would name
    fake_sock = str(tmp_path / "fake.sock")
    server = _serve(fake_sock)
    try:
        planted = entries / f"{pid}.json"
        e = Entry("victim", pid, fake_sock, str(tmp_path / "l.duckdb"), time.time())
        planted.write_text(json.dumps(e.as_json()))
        os.chown(planted, 65534, 65534)  # the file is nobody's
        assert registry.live_entries() == [] and planted.exists()  # neither listed nor deleted
        os.chown(planted, os.getuid(), os.getgid())
        os.chown(fake_sock, 65534, 65534)  # the entry is ours, the socket another user's
        assert registry.live_entries() == []
        os.chown(fake_sock, os.getuid(), os.getgid())
        assert [x.campaign for x in registry.live_entries()] == ["victim"]
        planted.unlink()
        planted.symlink_to(tmp_path / "elsewhere.json")  # a link is no entry either
        (tmp_path / "elsewhere.json").write_text(json.dumps(e.as_json()))
        assert registry.live_entries() == []
    finally:
        server.close()


def test_a_socket_whose_peer_is_another_user_does_not_answer_as_ours(tmp_path, monkeypatch):
    path = str(tmp_path / "s.sock")
    server = _serve(path)
    try:
        assert registry.socket_answers(path, mine=True)
        if getattr(socket, "SO_PEERCRED", None) is not None:
            monkeypatch.setattr(registry, "peer_uid", lambda s: os.getuid() + 1)
            monkeypatch.setattr(registry, "_mine", lambda p, k: True)
            assert not registry.socket_answers(path, mine=True)
            assert registry.socket_answers(path)  # without `mine`: anything that answers
    finally:
        server.close()
