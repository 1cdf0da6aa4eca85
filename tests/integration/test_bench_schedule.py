"""`netmap bench schedule` runs end to end as a real process (no timing asserted): its own
scratch PostgreSQL, N scheduled tasks, the real tick; every run it started has claimable
executions and no fire time was handled twice."""

from __future__ import annotations

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_schedule_starts_runs_and_reports_tick_and_delay():
    report = run_bench(
        "schedule", "--tasks", "200", "--every", "20", "--duration", "5", "--tick-seconds", "0.5"
    )
    assert report["benchmark"] == "schedule" and report["tasks"] == 200
    # 200 schedules spread over 20 s: about ten fire each second of the 5 s run.
    assert 20 <= report["runs_started"] <= 80
    assert report["runs_with_claimable_executions"] == report["runs_started"]
    assert report["doubled_slots"] == 0 and report["slots_skipped"] == 0
    assert report["fire_to_claimable"]["count"] == report["runs_started"]
    assert report["fire_to_claimable"]["p50_ms"] >= 0
    assert report["busy_tick"]["count"] == report["ticks"] >= 5
    assert report["idle_tick"]["count"] == 5
    assert set(report["goals"]) >= {"tick_met", "delay_met"}
