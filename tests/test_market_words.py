"""The marketplace is a folder: Vast's field names and addresses appear only in
`app/market/vast/` (its client) and `app/sim/` (its simulator). Everything else speaks
rentwatch's own words (`core/models.py`: `Offer`, `Instance`, `Status`), so a second market
plugs in without touching the engine.

Read on the tokens of the source: names, strings (docstrings included) and comments alike, so
a field cannot come back as an attribute, a dict key, a ledger key or a quoted citation.

The probes (`probes/`) are not read: each is a standalone script run on a rented host, which
imports nothing of ours (tests/test_layers.py), so it cannot take a market's words from the
market's folder; the watchdog's stop-yourself call is the host's half of the Vast recipe
(the container's variables and the API it calls) and ships as it is."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from .source_ast import parse

ROOT = Path(__file__).resolve().parent.parent
READ = ("app", "widgets")
ALLOWED = (Path("app/market/vast"), Path("app/sim"))
# Vast's own field names (its offer, instance, list-filter and create-answer JSON) and hosts
VAST_FIELDS = (
    "dph_base",
    "min_bid",
    "actual_status",
    "intended_status",
    "cur_state",
    "new_contract",
    "ssh_idx",
    "reliability2",
    "is_bid",
    "rentable",
    "select_filters",
    "ask_contract_id",
    "bundle_id",
    "public_ipaddr",
    "image_uuid",
    "runtype",
    "cpu_ram",
    "compute_cap",
    "gpu_display_active",
    "dlperf_per_dphtotal",
    "cuda_vers",
)
# an address on Vast's hosts (console.vast.ai, its sshN.vast.ai relays); the name "Vast.ai" in
# prose is not one
WORDS = re.compile(r"\b(" + "|".join(VAST_FIELDS) + r")\b|\b[\w-]+\.vast\.ai\b")
KINDS = (tokenize.NAME, tokenize.STRING, tokenize.COMMENT)


def vast_words(source: str) -> list[tuple[int, str]]:
    """(line, word) for each Vast field or address in a module's names, strings and comments."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in KINDS:
            out += [(tok.start[0], m.group(0)) for m in WORDS.finditer(tok.string)]
    return out


def _read() -> list[Path]:
    return [
        p
        for folder in READ
        for p in sorted((ROOT / folder).rglob("*.py"))
        if not any(p.relative_to(ROOT).is_relative_to(a) for a in ALLOWED)
    ]


def test_no_vast_word_outside_the_vast_folder_and_the_simulator():
    offenders = [
        f"{p.relative_to(ROOT)}:{line}: {word}"
        for p in _read()
        for line, word in vast_words(p.read_text())
    ]
    assert not offenders, "\n".join(offenders)


def test_the_walk_reads_the_engine_and_sees_a_vast_word():
    """Not vacuous: the walk reads the engine and the widgets, skips the allowed folders, and
    catches a field as a name, a key, a comment and an address."""
    read = {p.relative_to(ROOT).parts[:2] for p in _read()}
    assert {("app", "engine"), ("app", "core"), ("app", "cli"), ("widgets", "render.py")} <= read
    assert not any(p.relative_to(ROOT).is_relative_to(Path("app/sim")) for p in _read())
    planted = (
        "x = inst.actual_status\n"
        'detail = {"min_bid": 1}\n'
        "# is_bid in a comment\n"
        'URL = "https://console.vast.ai"\n'
        "ok = inst.status  # bid_floor, gpu_dph: our own words\n"
    )
    assert [w for _, w in vast_words(planted)] == [
        "actual_status",
        "min_bid",
        "is_bid",
        "console.vast.ai",
    ]
    assert vast_words('"""Vast.ai: a Rentable thing"""\n') == []


def _vast_imports(source: str) -> list[int]:
    """Lines of `source` that import from a `vast` package (relative or absolute)."""
    out = []
    for node in ast.walk(parse(source)):
        if (
            isinstance(node, ast.ImportFrom)
            and "vast" in (node.module or "").split(".")
            or isinstance(node, ast.Import)
            and any("vast" in a.name.split(".") for a in node.names)
        ):
            out.append(node.lineno)
    return out


def test_only_the_market_folder_opens_vasts_client():
    """The market is picked in one place (`market/factory.py`): nothing outside `app/market/`
    imports Vast's client, its rows or its query grammar."""
    offenders = [
        f"{p.relative_to(ROOT)}:{line}"
        for folder in READ
        for p in sorted((ROOT / folder).rglob("*.py"))
        if not p.relative_to(ROOT).is_relative_to(Path("app/market"))
        for line in _vast_imports(p.read_text())
    ]
    assert not offenders, offenders
    assert _vast_imports("from ..market.vast.client import VastClient\nimport os\n") == [1]
    assert _vast_imports("from ..market.factory import open_market\n") == []
