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
