"""`netmap bench purge` runs end to end as a real process (no timing asserted): its own
scratch PostgreSQL, two tasks filled through the upload route, the first deleted and
purged by the runner's job; the report's counts are the purge's."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_purge_reports_what_the_purge_removed():
    process = run_bench("purge", "--endpoints", "6000", "--shared", "400", check=False)
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "purge" and report["endpoints"] == 6000
    removed = report["removed"]
    assert removed["execution_endpoints"] == 6000 and removed["facts"] == 6000
    assert removed["user_assets"] == removed["global_assets"] == 6000 - 400
    assert removed["executions"] == 1 and removed["tasks"] == 1
    # 6000 endpoints at 2000 an asset batch: at least three batches, then the executions.
    assert report["batches"] >= 4 and report["claims"] == 1
    assert report["purge_seconds"] > 0 and report["cpu_seconds"] >= 0
