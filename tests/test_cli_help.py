"""`--help` says what each option of the commands a newcomer runs first does, and its default:
`demo --seed`, `--market-url`, `--policy` and `ls --json` printed a bare name."""

from __future__ import annotations

import argparse

import pytest
from rentwatch.cli.main import build_parser
from rentwatch.core.policy import POLICIES
from rentwatch.market.factory import DEFAULT_URL


def _sub(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subs.choices[name]


def _help(command: str, flag: str) -> str:
    p = _sub(command)
    action = next(a for a in p._actions if flag in a.option_strings)
    # as --help prints it, %(default)s filled in
    return p._get_formatter()._expand_help(action)


@pytest.mark.parametrize("command", ["demo", "watch", "run", "ls", "controller"])
def test_every_option_says_what_it_does(command):
    bare = [
        a.option_strings[0]
        for a in _sub(command)._actions
        if a.option_strings and not (a.help or "").strip()
    ]
    assert not bare, f"rentwatch {command}: options without help: {bare}"


@pytest.mark.parametrize(
    ("command", "flag", "says"),
    [
        ("demo", "--seed", "(default: 7)"),
        ("demo", "--time-scale", "(default: 30.0)"),
        ("watch", "--market-url", f"(default: {DEFAULT_URL})"),
        ("run", "--market-url", f"(default: {DEFAULT_URL})"),
        ("controller", "--market-url", f"(default: {DEFAULT_URL})"),
        ("watch", "--policy", "(default: default)"),
        ("run", "--policy", "(default: default)"),
        ("ls", "--json", "(default: the table)"),
    ],
)
def test_the_options_a_newcomer_asked_about_name_their_default(command, flag, says):
    assert says in _help(command, flag)


def test_policy_help_lists_every_policy():
    text = _help("run", "--policy")
    assert all(name in text for name in POLICIES)
