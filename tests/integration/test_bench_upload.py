"""`netmap bench upload` runs end to end and prints one JSON object (no timing asserted).

Run as a real process, as operators run it: it starts its own scratch PostgreSQL,
fills executions through the real upload route, measures and removes everything.
"""

from __future__ import annotations

import functools
import json

import pytest

from tests.support.es_simulator import EsSimulator
from tests.support.processes import run_bench

KINDS = {"normal", "final", "confirmed_retry", "dns_mixed"}
STATS = {"count", "p50_ms", "p95_ms", "p99_ms", "max_ms"}


run = functools.partial(run_bench, "upload", check=False)


@pytest.mark.slow
def test_bench_upload_reports_every_kind_for_every_size():
    process = run(
        "--sizes", "40,120", "--samples", "3", "--batch", "10", "--fill-batch", "40",
        "--shared-buffers", "64MB",
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["backend"] == "postgres" and report["postgres_shared_buffers"] == "64MB"
    assert set(report["sizes"]) == {"40", "120"}
    for size, result in report["sizes"].items():
        assert result["endpoints_before"] == int(size)
        assert KINDS <= set(result)
        for kind in KINDS:
            assert STATS <= set(result[kind])
        assert result["normal"]["count"] == 3 and result["final"]["count"] == 1
        endpoints = int(size) + 3 * 10  # the fill, then three measured batches of ten
        assert result["final_counts"] == {
            "observations": endpoints + 3 * 50,  # and three DNS sidecar batches of fifty
            "endpoints": endpoints,
            "ips": endpoints,
        }
    assert report["normal_p95_ratio_largest_vs_smallest"] > 0
    assert "fill 120" in process.stderr  # progress lines on stderr


@pytest.mark.slow
def test_bench_upload_on_the_simulator_cleans_up_after_itself():
    with EsSimulator() as simulator:
        process = run(
            "--backend", "elasticsearch", "--es-url", simulator.url, "--sizes", "30",
            "--samples", "2", "--batch", "5", "--fill-batch", "30", "--shared-buffers", "64MB",
        )  # fmt: skip
        assert process.returncode == 0, process.stderr[-2000:]
        report = json.loads(process.stdout)
        assert report["backend"] == "elasticsearch"
        assert report["sizes"]["30"]["final_counts"] == {
            "observations": 30 + 2 * 5 + 2 * 50,
            "endpoints": 40,
            "ips": 40,
        }
        assert simulator.index_names() == []  # only its own prefix, all deleted


def test_bad_sizes_are_a_usage_error():
    process = run("--sizes", "10,ten")
    assert process.returncode == 2
    assert "sizes must be integers" in process.stderr


def _check_http_report(report, clients, per_client, latency_sizes, samples):
    assert report["mode"] == "http" and report["clients"] == clients
    assert report["web_workers"] >= 1 and report["web_threads"] >= 1
    result = report["sizes"][str(per_client)]
    assert result["fill_observations"] == clients * per_client
    assert result["fill_endpoints_per_s"] > 0 and result["fill_seconds"] > 0
    assert result["fill_batch_latency"]["count"] == clients * -(-per_client // 20)
    for key in ("server_cpu_seconds", "postgres_cpu_seconds", "client_cpu_seconds"):
        assert result[key] >= 0
    assert result["server_cpu_seconds"] > 0  # the web workers did the work
    assert set(result["normal_by_batch_size"]) == {str(s) for s in latency_sizes}
    for summary in result["normal_by_batch_size"].values():
        assert STATS <= set(summary) and summary["count"] == samples
    # The first client also sent the latency batches; every final counted exactly.
    first = per_client + samples * sum(latency_sizes)
    expected = [first] + [per_client] * (clients - 1)
    assert result["final_counts"] == [
        {"observations": n, "endpoints": n, "ips": n} for n in expected
    ]


@pytest.mark.slow
def test_bench_upload_over_http_with_concurrent_clients():
    process = run(
        "--http", "--clients", "2", "--sizes", "50", "--fill-batch", "20", "--samples", "2",
        "--latency-batches", "5,10", "--shared-buffers", "64MB",
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["backend"] == "postgres"
    _check_http_report(report, clients=2, per_client=50, latency_sizes=(5, 10), samples=2)


@pytest.mark.slow
def test_bench_upload_over_http_on_the_simulator_cleans_up_after_itself():
    with EsSimulator() as simulator:
        process = run(
            "--http", "--backend", "elasticsearch", "--es-url", simulator.url, "--clients", "2",
            "--sizes", "40", "--fill-batch", "20", "--samples", "1", "--latency-batches", "5",
            "--shared-buffers", "64MB",
        )  # fmt: skip
        assert process.returncode == 0, process.stderr[-2000:]
        report = json.loads(process.stdout)
        assert report["backend"] == "elasticsearch"
        _check_http_report(report, clients=2, per_client=40, latency_sizes=(5,), samples=1)
        assert simulator.index_names() == []  # only its own prefix, all deleted
