"""A campaign's cap on what it pulls off its hosts, over all its jobs (issue 30, item 5): each
pull gets what the campaign has left, a pull replaces what the last of its kind left, and a
restarted controller counts what is already on its disk."""

from __future__ import annotations

from rentwatch.core.artifact_room import PULL_MAX_BYTES, PULL_MAX_FILES, ArtifactRoom
from rentwatch.ledger import EventKind

from tests.test_empty_answers import ScriptedLink, job_work, said


def files(*sizes: int) -> list[dict]:
    return [{"path": f"f{i}", "bytes": s, "sha256": "x"} for i, s in enumerate(sizes)]


def test_each_pull_gets_what_the_campaign_has_left():
    room = ArtifactRoom(max_bytes=1000, max_files=5)
    assert room.left_for("a", "artifacts") == (1000, 5)
    room.pulled("a", "artifacts", files(600, 100))
    assert room.left_for("b", "artifacts") == (300, 3)
    # a refused or missing file took nothing
    room.pulled("b", "artifacts", [*files(300), {"path": "big", "error": "over the cap"}])
    assert room.left_for("c", "checkpoint") == (0, 2)


def test_a_pull_replaces_what_the_last_of_its_kind_left():
    room = ArtifactRoom(max_bytes=1000, max_files=50)
    for _ in range(20):  # twenty checkpoints of one job: the disk holds the latest only
        assert room.left_for("a", "checkpoint") == (1000, 50)
        room.pulled("a", "checkpoint", files(900))
    assert room.left_for("a", "artifacts") == (100, 49)


def test_no_pull_gets_more_than_its_own_cap():
    assert ArtifactRoom().left_for("a", "artifacts") == (PULL_MAX_BYTES, PULL_MAX_FILES)


def test_a_restart_counts_what_the_campaign_pulled_already():
    work, _, ledger = job_work(ScriptedLink([said("")]))
    work.pulls.room.max_bytes = 1000
    for job, dest, size in (("train", "/a/c/train", 700), ("train", "/a/c/train/checkpoint", 200)):
        ledger.record(
            EventKind.ARTIFACTS, at=1.0, actor="engine", ok=True, reason="pulled", campaign="c",
            detail={"job": job, "files": files(size), "dest": dest},
        )  # fmt: skip
    work.restore(ledger)
    assert work.pulls.room.left_for("other", "artifacts")[0] == 100
    assert work.pulls.room.left_for("train", "artifacts")[0] == 800  # its own 700 given back
