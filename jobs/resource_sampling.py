"""Periodic job: sample host and netmap process resources into the bounded table (OPS-2).

A periodic lease makes one runner the sampler at a time; its host is the one
sampled. The supervisor's pid roots the process tree, so workers and the
renderer processes they started are included.
"""

from __future__ import annotations

import os

from app.ops.resources import store_sample, take_host_sample
from jobs.base import JobContext, PeriodicJob, PeriodicLease


def sample(ctx: JobContext, lease: PeriodicLease) -> None:
    # Read the host first (no connection held), then one short transaction to store.
    values = take_host_sample(ctx.settings, runner_root=os.getppid())
    store_sample(ctx.settings, values)


def job(settings) -> PeriodicJob:
    seconds = settings.ops.sample_seconds
    return PeriodicJob(
        "ops-resource-sampling",
        sample,
        interval_seconds=seconds,
        lease_seconds=max(60.0, seconds * 4),
    )
