"""`netmap bench soak` runs end to end and prints one JSON object (no timing asserted).

A real process, as operators run it: a scratch database, `netmap up` (gunicorn), writer
and reader processes for a fraction of a minute, then the finals. The counts must be
exact: every uploaded observation confirmed, in the receipts, the executions' counts and
the tasks' results totals.
"""

from __future__ import annotations

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_soak_reports_minutes_goals_and_exact_counts():
    report = run_bench(
        "soak", "--minutes", "0.1", "--writers", "2", "--readers", "1", "--batch", "200",
        "--assets", "2000", "--shared-buffers", "48MB",
    )  # fmt: skip
    assert report["benchmark"] == "soak"
    assert report["postgres_shared_buffers"] == "48MB"  # as the scratch server reports it
    assert (report["writers"], report["readers"], report["batch"]) == (2, 1, 200)
    [minute] = report["per_minute"]
    assert minute["minute"] == 1 and minute["seconds"] == pytest.approx(6.0, abs=0.1)
    assert minute["observations"] > 0 and minute["ingest_observations_per_s"] > 0
    assert minute["server_cpu_seconds"] > 0 and minute["postgres_cpu_seconds"] > 0
    assert minute["observations_per_server_cpu_s"] > 0 and minute["load_average_1m"] >= 0
    for route in ("results", "assets"):
        latency = minute[route]
        assert latency["count"] > 0
        assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["max_ms"]
    counts = report["counts"]
    assert counts["uploaded_observations"] > 0 and counts["uploaded_observations"] % 200 == 0
    assert counts["confirmed_observations"] == counts["uploaded_observations"]
    assert counts["results_total_endpoints"] == counts["uploaded_observations"]
    assert counts["execution_counts_exact"] is True and counts["exact"] is True
    goals = report["goals"]
    assert goals["read_p95_ms"] == 250.0 and goals["ingest_floor_of_first_minute"] == 0.8
    assert goals["met"] == (
        goals["reads_p95_within_goal_every_minute"]
        and goals["ingest_within_floor_every_minute"]
        and counts["exact"]
    )


@pytest.mark.slow
def test_bench_soak_with_search_language_reads():
    report = run_bench(
        "soak", "--minutes", "0.05", "--writers", "1", "--readers", "1", "--batch", "200",
        "--assets", "2000", "--shared-buffers", "48MB", "--language",
    )  # fmt: skip
    assert report["asset_queries"] == "search language"
    [minute] = report["per_minute"]
    assert minute["assets"]["count"] > 0  # every query answered 200 (a 4xx stops the bench)
    assert report["counts"]["exact"] is True
