"""Command-line errors end in a message, not a traceback."""

from __future__ import annotations

import subprocess
import sys


def test_watch_with_a_missing_campaign_file_says_so(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "rentwatch", "watch", "--campaign", str(tmp_path / "none.toml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "cannot read campaign" in out.stderr and "Traceback" not in out.stderr
