"""What a campaign may still pull off its hosts: a cap over all its jobs, so a thousand jobs on
hostile hosts cannot fill the controller's disk. A pull replaces the last pull of the same kind
for the same job, so the use is the sum of each job's latest pulls."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

CAMPAIGN_MAX_BYTES = 50 << 30
CAMPAIGN_MAX_FILES = 200_000
PULL_MAX_BYTES = 2 << 30
PULL_MAX_FILES = 10_000


@dataclass
class ArtifactRoom:
    max_bytes: int = CAMPAIGN_MAX_BYTES
    max_files: int = CAMPAIGN_MAX_FILES
    held: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (job, kind)

    def left_for(self, job: str, kind: str) -> tuple[int, int]:
        """(bytes, files) the next pull of this kind for this job may take: its own cap, and
        no more than the campaign has left once what this pull replaces is given back."""
        b, f = self.held.get((job, kind), (0, 0))
        used_b = sum(v[0] for v in self.held.values()) - b
        used_f = sum(v[1] for v in self.held.values()) - f
        return (
            max(0, min(PULL_MAX_BYTES, self.max_bytes - used_b)),
            max(0, min(PULL_MAX_FILES, self.max_files - used_f)),
        )

    def pulled(self, job: str, kind: str, records: Iterable[dict[str, Any]]) -> None:
        """What a pull brought (its records: size and sha256 per file taken)."""
        got = [r for r in records if "sha256" in r and isinstance(r.get("bytes"), int)]
        self.held[(job, kind)] = (sum(int(r["bytes"]) for r in got), len(got))
