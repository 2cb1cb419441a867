"""Check an installed rentwatch as a user meets it: every command's --help answers, and the
demo's engine runs headless for a few seconds and releases what it holds on SIGTERM.

    python scripts/installed_check.py [--rentwatch PATH] [--seconds S]

Run with the Python of the environment the wheel was installed into (CI: a fresh venv with a
plain, non-editable install; tests/test_packaging.py: the wheel unpacked onto PYTHONPATH). It
fails if `rentwatch` is imported from this source tree instead of the install."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent


EVERY_HELP = """
import contextlib, io
from rentwatch.cli.main import build_parser, main
sub = next(a for a in build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
for name in sub.choices:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main([name, "--help"])
        except SystemExit as exc:
            code = exc.code
    if code not in (0, None) or "usage:" not in out.getvalue():
        raise SystemExit(f"{name} --help exited {code}: {out.getvalue()[-400:]}")
print(" ".join(sub.choices))
"""


def fail(why: str) -> None:
    print(f"installed-check: FAIL {why}", file=sys.stderr)
    raise SystemExit(1)


def run(cmd: list[str], timeout: float = 60, env: dict[str, str] | None = None) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        fail(f"{' '.join(cmd[1:])} exited {p.returncode}: {(p.stderr or p.stdout)[-400:]}")
    if "Warning:" in p.stderr:  # a dependency's warnings ahead of every command's output
        fail(f"{' '.join(cmd[1:])} printed warnings: {p.stderr[-400:]}")
    return p.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rentwatch", default="rentwatch", help="the installed command")
    ap.add_argument("--seconds", type=float, default=8.0, help="how long the demo runs")
    args = ap.parse_args()
    where = run([sys.executable, "-c", "import rentwatch, sys; print(rentwatch.__file__)"])
    if Path(where.strip()).resolve().is_relative_to(SOURCE / "app"):
        fail(f"rentwatch imported from the source tree ({where.strip()}), not the install")
    rw = [args.rentwatch]
    run([*rw, "--help"])
    # every command's --help in one process: the installed command builds the whole parser
    # at each start, so a process per command would only start Python again
    subcommands = run([sys.executable, "-c", EVERY_HELP]).split()
    print(f"installed-check: --help of rentwatch and its {len(subcommands)} commands answered")
    with tempfile.TemporaryDirectory() as tmp:  # a command that loads the SSH side, quietly
        run([*rw, "ls"], env=dict(os.environ, XDG_RUNTIME_DIR=tmp, RENTWATCH_RUNTIME_DIR=tmp))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, HOME=tmp, XDG_RUNTIME_DIR=tmp, RENTWATCH_RUNTIME_DIR=tmp)
        ledger = Path(tmp) / "demo.duckdb"
        proc = subprocess.Popen(
            [*rw, "controller", "--demo", "--time-scale", "120", "--ledger", str(ledger)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp,
        )
        # the engine's first create is the event waited on (a loaded box starts slowly), then
        # at least `--seconds` of running before the SIGTERM
        lines: list[str] = []
        created = threading.Event()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.append(line)
                if "create" in line:
                    created.set()

        reader = threading.Thread(target=pump, daemon=True)
        started = time.monotonic()
        reader.start()
        deadline = started + max(args.seconds, 300)
        while not created.wait(0.5):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                fail(
                    f"the demo's engine created nothing ({proc.returncode}): {''.join(lines)[-600:]}"
                )
        time.sleep(max(0.0, args.seconds - (time.monotonic() - started)))
        if proc.poll() is not None:
            fail(f"the demo's engine ended early ({proc.returncode}): {''.join(lines)[-600:]}")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("the demo's engine did not exit within 120 s of SIGTERM")
        reader.join(timeout=10)
        out = "".join(lines)
        if proc.returncode != 128 + signal.SIGTERM:
            fail(f"the demo's engine exited {proc.returncode}: {out[-800:]}")
        if "Traceback" in out:
            fail(f"a traceback in the demo's output: {out[-800:]}")
    print(f"installed-check: the demo's engine ran {args.seconds:g} s and released on SIGTERM")
    print("installed-check: ok")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
