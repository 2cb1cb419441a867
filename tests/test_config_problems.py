"""A campaign file with several mistakes says every one of them at once, each with its line,
its key and why, so one edit fixes the file (it said the first, and the next only once that
was fixed); `rentwatch` prints them one a line. A file with one mistake reads as before."""

from __future__ import annotations

import pytest
from rentwatch.cli.main import main
from rentwatch.core.errors import ConfigError, ConfigErrors
from rentwatch.core.policy import DEFAULT
from rentwatch.market.factory import load_campaign

BAD = """\
name = "bad name!"
image = "pytorch/pytorch"
max_dph = -1
fleet = 0
budget_usd = 5
colour = "blue"

[policy]
frezee_window_s = 10
boot_deadline_s = "soon"

[[jobs]]
name = "a"

[[jobs]]
name = "b"
run = "echo"
retries = -3
"""

WANT = [
    "line 6: colour: unknown key",
    "line 1: name: use letters, digits",
    "line 3: max_dph: must be above 0",
    "line 4: fleet: must be between 1 and 10000",
    "policy: unknown setting 'frezee_window_s'",
    "policy.boot_deadline_s: expected a float, got 'soon'",
    "line 12: jobs[0].run: a command is required",
    "line 18: jobs[1].retries: must be between 0 and 1000",
]


def test_every_problem_of_a_campaign_file_is_said_at_once():
    with pytest.raises(ConfigErrors) as got:
        load_campaign(BAD, "c.toml")
    problems = got.value.problems
    assert len(problems) == len(WANT), problems
    for want, problem in zip(WANT, problems, strict=True):
        assert problem.startswith("c.toml: ") and want in problem, (want, problem)
    assert str(got.value).startswith(f"c.toml: {len(WANT)} problems: ")


def test_one_problem_reads_as_it_did():
    text = BAD.split("\n[policy]")[0].replace('"bad name!"', '"ok"').replace("-1", "1")
    text = text.replace("fleet = 0", "fleet = 1")
    with pytest.raises(ConfigError, match=r"^c\.toml: line 6: colour: unknown key"):
        load_campaign(text, "c.toml")


def test_every_bad_policy_setting_is_said():
    with pytest.raises(ConfigErrors) as got:
        DEFAULT.with_overrides({"nope": 1, "boot_deadline_s": -5, "rank": "best"})
    assert len(got.value.problems) == 3


def test_the_cli_prints_each_problem_on_its_own_line(tmp_path, capsys):
    f = tmp_path / "bad.toml"
    f.write_text(BAD)
    assert main(["plan", "--campaign", str(f)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"rentwatch: bad configuration: {len(WANT)} problems"
    assert len(err) == 1 + len(WANT)
    for want, line in zip(WANT, err[1:], strict=True):
        assert line.startswith(f"  {f}: ") and want in line, (want, line)


def test_the_user_config_says_both_of_its_problems(tmp_path):
    from rentwatch.notify.notifier import load_user_config

    path = tmp_path / "config.toml"
    path.write_text('notify = "  "\nnotify_level = "loud"\n')
    with pytest.raises(ConfigErrors) as got:
        load_user_config(path)
    notify, level = got.value.problems
    assert "`notify` must be a list of apprise URLs" in notify
    assert "unknown notify level" in level


def test_every_problem_of_one_job_is_said():
    text = 'name = "c"\nimage = "img"\nmax_dph = 0.5\nbudget_usd = 10\n\n[[jobs]]\n'
    text += 'name = "a"\nrun = "true"\nretries = -3\nartifacts = ["/etc/passwd"]\ntimeout_min = 0\n'
    with pytest.raises(ConfigErrors) as got:
        load_campaign(text, "c.toml")
    said = got.value.problems
    assert len(said) == 3, said
    assert "line 10: jobs[0].artifacts: '/etc/passwd' is not a relative path" in said[0]
    assert "line 9: jobs[0].retries: must be between 0 and 1000" in said[1]
    assert "line 11: jobs[0].timeout_min: must be above 0" in said[2]
