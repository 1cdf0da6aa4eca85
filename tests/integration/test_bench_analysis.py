"""`netmap bench analysis` runs end to end as a real process (no timing asserted): its
own scratch PostgreSQL, a first scan whose every endpoint is new, then a second scan
of the same estate with a known share changed, gone and new."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_analysis_finds_exactly_the_changes_it_seeded():
    process = run_bench("analysis", "--endpoints", "2000", check=False)
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "analysis" and report["endpoints"] == 2000
    assert report["first_scan_new"] == 2000
    # The second scan leaves out every hundredth endpoint (20 gone), changes another
    # hundredth (20) and adds 20 beyond the estate, one of which it leaves out too.
    assert report["changes"] == {"new": 19, "changed": 20, "gone": 20, "reappeared": 0}
    assert report["execution_endpoints"] == 1999
    assert report["slices"] == 1 and report["endpoints_per_s"] > 0
