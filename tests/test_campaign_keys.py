"""Campaign keys read ahead of their behaviour: `rental`, `notify`, and a job's size
(`ref_gpu`, `ref_hours`). Each is checked, and a wrong one names itself."""

from __future__ import annotations

import pytest
from rentwatch.core.errors import ConfigError
from rentwatch.market.factory import load_campaign

from tests.campaigns import campaign_text

JOB = """
[[jobs]]
name = "j1"
run = "true"
{extra}
"""


def test_rental_notify_and_job_size_parse():
    c = load_campaign(
        campaign_text(extra='rental = "auto"\nnotify = ["json://localhost/hook"]\n')
        + JOB.format(extra='ref_gpu = "RTX 4090"\nref_hours = 0.2\ncheckpoint = "ckpt"')
    )
    assert c.rental == "auto" and c.notify == ("json://localhost/hook",)
    assert c.jobs[0].ref_gpu == "RTX 4090" and c.jobs[0].ref_hours == 0.2
    plain = load_campaign(campaign_text())
    assert plain.rental == "on-demand" and plain.notify == ()


@pytest.mark.parametrize(
    ("extra", "job", "says"),
    [
        ('rental = "spot"', "", "rental: expected one of on-demand, interruptible, auto"),
        ("rental = 3", "", "rental: expected str"),
        ('policy = "seed"', "", "choose the policy itself with --policy .seed."),
        ('notify = "json://x"', "", "notify: expected list"),
        ("notify = [1]", "", "notify: expected a list of notification URLs"),
        ("", 'ref_gpu = "RTX 4090"\nref_hours = 0', "jobs[0].ref_hours: must be above 0"),
        ("", 'ref_gpu = "RTX 4090"\nref_hours = -1', "jobs[0].ref_hours: must be above 0"),
        ("", 'ref_gpu = ""\nref_hours = 1', "jobs[0].ref_gpu: a GPU name"),
        # an artifact path the pull would refuse is refused before anything is rented
        ("", 'artifacts = ["out/", "../x"]', "jobs[0].artifacts: '../x' is not a relative path"),
        ("", 'artifacts = ["/etc/passwd"]', "jobs[0].artifacts: '/etc/passwd' is not a rel"),
        ("", 'artifacts = [""]', "jobs[0].artifacts: '' is not a relative path"),
        ("", 'ref_gpu = "RTX 4090"', "jobs[0].ref_hours: ref_gpu and ref_hours size a job"),
        ("", "ref_hours = 2", "jobs[0].ref_gpu: ref_gpu and ref_hours size a job"),
    ],
)
def test_wrong_values_name_the_key(extra, job, says):
    text = campaign_text(extra=extra + "\n") + (JOB.format(extra=job) if job else "")
    with pytest.raises(ConfigError, match=says.replace("[", r"\[").replace("]", r"\]")):
        load_campaign(text)


def _two(a: str, b: str) -> str:
    """Two jobs with these extra lines (a checkpoint, a workdir)."""
    return campaign_text() + JOB.format(extra=a) + JOB.replace("j1", "j2").format(extra=b)


@pytest.mark.parametrize(
    ("a", "b", "folder"),
    [
        ('checkpoint = "ckpt"', 'checkpoint = "ckpt/"', "ckpt"),
        ('checkpoint = "ckpt"', 'checkpoint = "ckpt/inner"', "ckpt"),
        ('checkpoint = "ckpt"\nworkdir = "~/w"', 'checkpoint = "ckpt"\nworkdir = "w"', "w/ckpt"),
        ('checkpoint = "ckpt"\nworkdir = "~/w"', 'checkpoint = "w/ckpt"', "w/ckpt"),
        ('checkpoint = "."', 'checkpoint = "ckpt"\nworkdir = "w"', "."),
    ],
)
def test_two_jobs_may_not_checkpoint_into_one_folder(a, b, folder):
    """Jobs run one after another on a host: a second job whose checkpoint folder is the
    first's (or inside it) would start from the first job's state, as if it were its own."""
    with pytest.raises(ConfigError, match=f"jobs j1 and j2 share the checkpoint folder '{folder}'"):
        load_campaign(_two(a, b))


def test_jobs_with_their_own_checkpoint_folders_parse():
    for a, b in (
        ('checkpoint = "ckpt-1"', 'checkpoint = "ckpt-2"'),
        ('checkpoint = "ckpt"\nworkdir = "w1"', 'checkpoint = "ckpt"\nworkdir = "w2"'),
        ('checkpoint = "ckpt"\nworkdir = "/data/a"', 'checkpoint = "ckpt"'),
        ('checkpoint = "ckpt"', ""),
    ):
        assert len(load_campaign(_two(a, b)).jobs) == 2


def test_a_jobs_error_points_at_the_jobs_line_not_the_campaigns_name():
    # a newcomer's `name = 3` in their second job said "line 1: name:", the campaign's name
    base = 'name = "c"\nimage = "img"\nmax_dph = 0.5\nbudget_usd = 10\n'
    jobs = '\n[[jobs]]\nname = "a"\nrun = "true"\n\n[[jobs]]\nrun = "true"\nname = {}\n'
    with pytest.raises(ConfigError, match=r"^campaign: line 12: jobs\[1\]\.name: letters"):
        load_campaign(base + jobs.format(3))
    with pytest.raises(ConfigError, match=r"line 12: jobs\[1\]\.name: job names must be unique"):
        load_campaign(base + jobs.format('"a"'))
    # a key the job lacks points at the job's header
    with pytest.raises(ConfigError, match=r"line 10: jobs\[1\]\.run: a command is required"):
        load_campaign(base + jobs.format('"b"').replace('run = "true"\nname', "name"))


def test_an_unknown_key_is_named_with_its_line_and_the_key_meant():
    base = 'name = "c"\nimage = "img"\nmax_dph = 0.5\nbudget_usd = 10\n'
    jobs = '\n[[jobs]]\nname = "a"\nrun = "true"\n\n[[jobs]]\nname = "b"\nrnu = "x"\n'
    # the job's missing `run` is said with it: every problem of a file at once
    with pytest.raises(
        ConfigError,
        match=r"^campaign: 2 problems: campaign: line 12: jobs\[1\]\.rnu: unknown key: did you "
        r"mean 'run'\?.*; campaign: line 10: jobs\[1\]\.run: a command is required",
    ):
        load_campaign(base + jobs)
    # `[[job]]` for `[[jobs]]`: a table header, not `key = value`, still has its line
    with pytest.raises(
        ConfigError, match=r"^campaign: line 6: job: unknown key: did you mean 'jobs'\?"
    ):
        load_campaign(base + '\n[[job]]\nname = "a"\nrun = "true"\n')
    with pytest.raises(ConfigError, match=r"^campaign: line 5: colour: unknown key: \(known: "):
        load_campaign(base + 'colour = "red"\n')
