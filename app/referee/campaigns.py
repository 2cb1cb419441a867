"""The campaigns the referee plays: the one refereed when none is given, the default job set
a campaign without jobs gets, and a warm run's earlier campaign."""

from __future__ import annotations

from dataclasses import replace

from ..core.campaign import Campaign, Job

DEFAULT_JOB_MIN = 30.0  # market minutes each default job computes on DEFAULT_REF_GPU
DEFAULT_REF_GPU = "RTX 4090"
JOBS_PER_INSTANCE = 2  # default job set: two jobs per fleet slot (hold and batch pays)


def referee_campaign() -> Campaign:
    """The campaign refereed when none is given: the demo's terms without its jobs, which are sized
    in wall seconds (at 600x, a 40-second sleep is 400 market minutes); the default job set."""
    from ..market.factory import load_campaign
    from ..run.dashboard import DEMO_CAMPAIGN

    text = DEMO_CAMPAIGN.replace('"demo"', '"referee"')
    return replace(load_campaign(text, "referee campaign"), jobs=())


def with_jobs(campaign: Campaign) -> Campaign:
    """The campaign with its own jobs, or else the referee's default set: JOBS_PER_INSTANCE jobs
    per fleet slot, each DEFAULT_JOB_MIN market minutes on a DEFAULT_REF_GPU, so no job runs on
    wall time."""
    if campaign.jobs:
        return campaign
    hours = DEFAULT_JOB_MIN / 60
    jobs = (
        Job(name=f"ref-{i + 1}", run="true", retries=3, ref_gpu=DEFAULT_REF_GPU, ref_hours=hours)
        for i in range(JOBS_PER_INSTANCE * campaign.fleet)
    )
    return replace(campaign, jobs=tuple(jobs))


def warmup_campaign(campaign: Campaign) -> Campaign:
    """A warm run's earlier campaign: the same terms and jobs under other names."""
    jobs = tuple(replace(j, name=f"w-{j.name}"[:64]) for j in campaign.jobs)
    return replace(campaign, name=f"w-{campaign.name}"[:64], jobs=jobs)
