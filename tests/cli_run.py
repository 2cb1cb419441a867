"""`rentwatch ARGS` called in the test's own process: what a `python -m rentwatch ARGS`
subprocess answers (exit status, stdout, stderr), without a Python to start and rentwatch to
import for each call (about a CPU second each). For the tests that ask a CLI about a
controller or a ledger, not about the process boundary itself."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
from collections.abc import Iterator

from rentwatch.cli.main import main


@contextlib.contextmanager
def _environ(env: dict[str, str] | None) -> Iterator[None]:
    if env is None:
        yield
        return
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`env`: the whole environment the call sees, as `subprocess.run`'s (the test's own if
    None)."""
    out, err = io.StringIO(), io.StringIO()
    with _environ(env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors, `--help`; as the interpreter
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
            if not isinstance(exc.code, int | None):
                print(exc.code, file=err)
    return subprocess.CompletedProcess(
        ["rentwatch", *args], code, stdout=out.getvalue(), stderr=err.getvalue()
    )
