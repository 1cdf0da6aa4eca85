"""`netmap bench retention` runs end to end as a real process over two simulated months
of daily runs (no timing asserted): the runs beyond keep_runs are purged with their
execution endpoints and facts, fact months past the retention are dropped whole, and
the database's size stops growing once both windows have passed."""

from __future__ import annotations

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_retention_keeps_runs_and_fact_months_bounded():
    report = run_bench(
        "retention", "--endpoints", "100", "--days", "66", "--keep-runs", "2",
        "--retention-months", "1", "--sample-days", "3", "--shared-buffers", "48MB",
    )  # fmt: skip
    assert report["benchmark"] == "retention" and report["observations"] == 6600
    samples = report["samples"]
    assert [s["day"] for s in samples] == list(range(3, 67, 3))
    for sample in samples:
        # Run retention: the newest two runs and their rows only.
        assert sample["runs"] == sample["executions"] == 2
        assert sample["execution_endpoints"] == 200
        # Fact retention: the simulated month only; the facts of purged runs went with
        # them, and yesterday's run's facts with their month when a month turned between.
        assert len(sample["fact_months"]) == 1
        assert sample["facts"] in (100, 200)
        assert sample["assets"] == 100  # the same endpoints every day
        # What the sampled day's phases took, retention's own beside the scan's.
        phases = sample["day_phase_s"]
        assert list(phases) == [
            "upload", "projection", "analysis", "run_purge", "fact_month_drop", "vacuum",
        ]  # fmt: skip
        assert all(seconds >= 0 for seconds in phases.values()) and phases["upload"] > 0
    assert len({s["fact_months"][0] for s in samples}) >= 2  # months were dropped on the way
    assert report["window_days"] == 62
    assert report["growth_after_window"] is not None and report["growth_after_window"] > 0
