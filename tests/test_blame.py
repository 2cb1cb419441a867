"""Blame by evidence: which failures are the campaign's (stop, tell, no quarantine) and which
stay the host's. Table-driven over the pure classifier."""

from __future__ import annotations

import pytest
from rentwatch.core.blame.fault import (
    Evidence,
    Failure,
    Party,
    Stage,
    blame,
    normalise,
    shows_layers,
)

IMG = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
DENIED = (
    "pull access denied for acme/private, repository does not exist or may require 'docker login'"
)
MANIFEST = f"Error response from daemon: manifest for {IMG} not found: manifest unknown"
# an OCI failure the image causes (its entrypoint does not exist); a bare runtime failure is the
# host's (test_the_same_oci_runtime_failure_on_two_machines_blames_the_hosts)
OCI = (
    "failed to create shim task: OCI runtime create failed: runc create failed: unable to start"
    ' container process: exec: "/entrypoint.sh": no such file or directory'
)


def _f(stage, text, machine=1, image=IMG, code=None, job=None):
    return Failure(machine, image, stage, text, code, job)


CASES = [
    # (why, failure, evidence, party, cause)
    (
        "no python3 in the image: the shell's answer, on two machines",
        _f(Stage.PROBE, "sh: 1: python3: not found", code=127),
        Evidence((_f(Stage.PROBE, "bash: line 1: python3: command not found", 2, code=127),)),
        Party.CAMPAIGN,
        "no_python",
    ),
    (
        "bash's wording, one machine alone: a suspicion (issue 30)",
        _f(Stage.PROBE, "bash: python3: command not found", code=127),
        Evidence(),
        Party.SUSPECT,
        "no_python",
    ),
    (
        "no python3 on a host after a preflight with the image computed elsewhere",
        _f(Stage.PROBE, "bash: line 1: python3: command not found", code=127),
        Evidence(
            (_f(Stage.PROBE, "sh: 1: python3: not found", 2, code=127),),
            probe_ok_on=frozenset({(IMG, 3)}),
        ),
        Party.HOST,
        "host",
    ),
    (
        "the probe could not import torch, on two machines",
        _f(Stage.PROBE, "ModuleNotFoundError: No module named 'torch'"),
        Evidence((_f(Stage.PROBE, "No module named 'torch'", 2),)),
        Party.CAMPAIGN,
        "no_torch",
    ),
    (
        "another module missing, on two machines",
        _f(Stage.PROBE, "ModuleNotFoundError: No module named 'ctypes'"),
        Evidence((_f(Stage.PROBE, "ModuleNotFoundError: No module named 'ctypes'", 2),)),
        Party.CAMPAIGN,
        "module_missing",
    ),
    (
        "two machines failing for different lacks prove neither",
        _f(Stage.PROBE, "ModuleNotFoundError: No module named 'torch'"),
        Evidence((_f(Stage.PROBE, "sh: 1: python3: not found", 2, code=127),)),
        Party.SUSPECT,
        "no_torch",
    ),
    (
        "a CUDA error is the host's",
        _f(
            Stage.PROBE,
            "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version",
        ),
        Evidence(),
        Party.HOST,
        "host",
    ),
    (
        "a registry denial, first machine: suspect, no quarantine yet",
        _f(Stage.PULL, DENIED, image="acme/private:1"),
        Evidence(),
        Party.SUSPECT,
        "pull_denied",
    ),
    (
        "the same denial on a second machine: the campaign's",
        _f(Stage.PULL, DENIED, machine=2, image="acme/private:1"),
        Evidence((_f(Stage.PULL, DENIED, machine=1, image="acme/private:1"),)),
        Party.CAMPAIGN,
        "pull_denied",
    ),
    (
        "the same denial twice on one machine decides nothing",
        _f(Stage.PULL, DENIED, machine=1, image="acme/private:1"),
        Evidence((_f(Stage.PULL, DENIED, machine=1, image="acme/private:1"),)),
        Party.SUSPECT,
        "pull_denied",
    ),
    (
        "a denial for an image that already ran elsewhere is the host's (its registry mirror)",
        _f(Stage.PULL, MANIFEST, machine=2),
        Evidence((_f(Stage.PULL, MANIFEST, machine=1),), frozenset({(IMG, 9)})),
        Party.HOST,
        "host",
    ),
    (
        "a denial for another image is no evidence about this one",
        _f(Stage.PULL, DENIED, machine=2, image="acme/private:1"),
        Evidence((_f(Stage.PULL, DENIED, machine=1, image="acme/other:1"),)),
        Party.SUSPECT,
        "pull_denied",
    ),
    (
        "unauthorized: the credentials",
        _f(Stage.PULL, "unauthorized: authentication required", machine=4),
        Evidence((_f(Stage.PULL, "unauthorized: authentication required", machine=3),)),
        Party.CAMPAIGN,
        "pull_denied",
    ),
    (
        "one OCI failure: the host's",
        _f(Stage.PULL, OCI),
        Evidence(),
        Party.HOST,
        "host",
    ),
    (
        "the same fatal line on two machines, image never ran: the campaign's",
        _f(Stage.PULL, OCI, machine=2),
        Evidence((_f(Stage.PULL, OCI, machine=1),)),
        Party.CAMPAIGN,
        "repeated_fatal",
    ),
    (
        "host-side plumbing stays the host's however often it repeats",
        _f(Stage.PULL, "failed to inject CDI devices: unresolvable CDI devices", machine=2),
        Evidence(
            (_f(Stage.PULL, "failed to inject CDI devices: unresolvable CDI devices", machine=1),)
        ),
        Party.HOST,
        "host",
    ),
    (
        "a job failing the same way on two machines",
        _f(Stage.JOB, "python: can't open file 'train.py'", machine=2, code=2, job="train-1"),
        Evidence(
            (_f(Stage.JOB, "python: can't open file 'train.py'", machine=1, code=2, job="train-1"),)
        ),
        Party.CAMPAIGN,
        "repeated_job",
    ),
    (
        "a job that finished elsewhere is not broken",
        _f(Stage.JOB, "Killed", machine=2, code=137, job="train-1"),
        Evidence(
            (_f(Stage.JOB, "Killed", machine=1, code=137, job="train-1"),),
            jobs_ok=frozenset({(IMG, "train-1")}),
        ),
        Party.HOST,
        "host",
    ),
    (
        "a different exit code is a different failure",
        _f(Stage.JOB, "error", machine=2, code=1, job="train-1"),
        Evidence((_f(Stage.JOB, "error", machine=1, code=137, job="train-1"),)),
        Party.SUSPECT,
        "repeated_job",
    ),
]


@pytest.mark.parametrize("why, failure, evidence, party, cause", CASES, ids=[c[0] for c in CASES])
def test_blame_table(why, failure, evidence, party, cause):
    b = blame(failure, evidence)
    assert (b.party, b.cause) == (party, cause), b.reason
    assert b.quarantine is (party is Party.HOST)
    assert b.reason


def test_normalise_blanks_per_host_parts_only():
    a = "8f2e1a9c3b4d: Downloading  120.5MB/800.0MB"
    b = "1234567890ab: Downloading  300.1MB/800.0MB"
    assert normalise(a) == normalise(b)
    assert normalise("pull access denied for a") != normalise("manifest unknown")


def probe_run_blame(machine_id, image, exit_status, stdout, stderr):
    """The campaign's fault behind a probe run, as the preflight reads it (preflight_run.py:
    the run's text, then `blame`), or None when it is (or may be) the host's."""
    from rentwatch.core.blame.fault import Failure, Party, Stage, blame
    from rentwatch.engine.hosts.probe_io import probe_run_text

    text = probe_run_text(stdout, stderr)
    if text is None:
        return None
    found = blame(Failure(machine_id, image, Stage.PROBE, text, exit_status))
    return found if found.party is not Party.HOST else None


def test_probe_run_blame_reads_the_shell_and_the_probe():
    b = probe_run_blame(
        7, "nvidia/cuda:12.4.1", 127, b"", b"bash: line 1: python3: command not found\n"
    )
    assert b is not None and b.cause == "no_python" and not b.quarantine
    doc = b'{"schema": 1, "probe": "preflight", "ok": false, "error": {"type": "ModuleNotFoundError", "message": "No module named \'torch\'"}}\n'
    assert probe_run_blame(7, IMG, 0, doc, b"").cause == "no_torch"  # type: ignore[union-attr]
    cuda = b'{"schema": 1, "probe": "preflight", "ok": false, "error": {"type": "RuntimeError", "message": "CUDA error: no kernel image"}}'
    assert probe_run_blame(7, IMG, 1, cuda, b"") is None  # the host's: the usual path
    ok = b'{"schema": 1, "probe": "preflight", "ok": true, "error": null}'
    assert probe_run_blame(7, IMG, 0, ok, b"ModuleNotFoundError: No module named 'pynvml'") is None
    assert probe_run_blame(7, IMG, 1, b"\x1b[2J garbage", b"") is None


def test_commands_follow_the_check_policy():
    from rentwatch.core.preflight.verdict import CheckPolicy
    from rentwatch.engine.hosts.probe_io import NET_PROBE_URL, preflight_command

    assert preflight_command(CheckPolicy()) == "python3 -"
    off = CheckPolicy(pcie=False, vram=False, disk=False)
    assert preflight_command(off) == "python3 - --pcie-mb 0 --no-vram --disk-mb -1"
    with_net = preflight_command(CheckPolicy(), NET_PROBE_URL)
    assert with_net.startswith("python3 - --net-url ") and "'" in with_net  # quoted for the shell
    assert preflight_command(CheckPolicy(net=False), NET_PROBE_URL) == "python3 -"


def test_evidence_accumulates():
    e = Evidence().failed(_f(Stage.PULL, OCI, machine=1)).ran("other:1", 5)
    assert blame(_f(Stage.PULL, OCI, machine=2), e).party is Party.CAMPAIGN
    assert blame(_f(Stage.PULL, OCI, machine=2), e.ran(IMG, 9)).party is Party.HOST
    j = _f(Stage.JOB, "boom", machine=2, code=1, job="t")
    e2 = Evidence().failed(_f(Stage.JOB, "boom", machine=1, code=1, job="t"))
    assert blame(j, e2).party is Party.CAMPAIGN
    assert blame(j, e2.job_finished(IMG, "t")).party is Party.HOST


def test_a_jobs_failure_is_compared_by_its_last_line():
    from rentwatch.core.blame.fault import last_error_line

    a = "Traceback (most recent call last):\n  File \"train.py\", line 3\nKeyError: 'lr'\n\n"
    b = "\x1b[31mloading 12%\r\nTraceback (most recent call last):\nKeyError: 'lr'\n"
    assert last_error_line(a) == last_error_line(b) == "KeyError: 'lr'"
    assert last_error_line("") == "" and last_error_line("\x1b[2J\n \n") == ""
    f1 = _f(Stage.JOB, last_error_line(a), machine=1, code=1, job="t")
    f2 = _f(Stage.JOB, last_error_line(b), machine=2, code=1, job="t")
    assert blame(f2, Evidence((f1,))).party is Party.CAMPAIGN


def test_a_denial_after_the_registry_served_layers_elsewhere_is_the_hosts() -> None:
    """Two hosts printing a registry denial while a third downloads the image's layers: the
    registry serves the image, so the denials are those hosts' (a broken mirror, a stale
    login), never a campaign fault that stops the campaign."""
    image = "pytorch/pytorch:2.4.0-cuda12.4-cudnn9-runtime"
    line = "pull access denied for pytorch/pytorch, repository does not exist or may require authorization"
    assert shows_layers("b46ecda855b3: Downloading  1197.0MB/1630.6MB")
    assert not shows_layers(line)
    ev = Evidence().served(image, 3)
    first = Failure(1, image, Stage.PULL, line)
    assert blame(first, ev).party is Party.HOST
    second = Failure(2, image, Stage.PULL, line)
    assert blame(second, ev.failed(first)).party is Party.HOST
    # without the layers seen anywhere, two machines make it the campaign's, as before
    assert blame(second, Evidence().failed(first)).party is Party.CAMPAIGN


def test_the_same_oci_runtime_failure_on_two_machines_blames_the_hosts():
    """A container runtime that cannot start the container is the host's (the referee saw two
    machines with the same OCI line end a healthy campaign as the image's fault); an image
    whose entrypoint does not exist still reads as the image's."""
    from rentwatch.core.blame.fault import Evidence, Failure, Party, Stage, blame

    line = "failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process"
    ev = Evidence().failed(Failure(1, "img", Stage.PULL, line))
    assert blame(Failure(2, "img", Stage.PULL, line), ev).party is Party.HOST
    own = 'OCI runtime create failed: exec: "train.sh": executable file not found in $PATH'
    ev = Evidence().failed(Failure(1, "img", Stage.PULL, own))
    assert blame(Failure(2, "img", Stage.PULL, own), ev).party is Party.CAMPAIGN
