"""`netmap bench projection` runs end to end and prints one JSON object (no timing asserted)."""

from __future__ import annotations

import functools

import pytest

from tests.support.es_simulator import EsSimulator
from tests.support.processes import run_bench

KEYS = {
    "endpoints_per_s",
    "page_p50_ms",
    "page_p95_ms",
    "heartbeat_late_max_ms",
    "pool_wait_p95_ms",
    "endpoints",
    "backend",
}


run = functools.partial(run_bench, "projection")


def test_bench_projection_on_the_simulator_cleans_up_after_itself():
    with EsSimulator() as simulator:
        report = run(
            *("--backend", "elasticsearch", "--es-url", simulator.url),
            *("--endpoints", "450", "--executions", "2", "--workers", "2", "--page-size", "100"),
        )
        assert KEYS <= set(report) and report["backend"] == "elasticsearch"
        assert report["completed_executions"] == 2 and report["failed_slices"] == 0
        assert report["pages"] >= 5 and not report["server_side_pages"]
        assert simulator.index_names() == []


@pytest.mark.slow
def test_bench_projection_on_a_scratch_postgres_with_republish():
    report = run("--endpoints", "500", "--page-size", "100", "--republish", "--hostnames")
    assert KEYS <= set(report) and report["backend"] == "postgres"
    assert report["settings"]["hostnames"] is True
    assert report["server_side_pages"] and report["completed_executions"] == 1
    assert report["republish"]["completed_executions"] == 1


def test_the_heartbeat_must_fit_the_lease():
    process = run("--heartbeat-seconds", "5", "--lease-seconds", "10", check=False)
    assert process.returncode != 0 and "--heartbeat-seconds" in process.stderr
