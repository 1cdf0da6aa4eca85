"""`netmap bench store` runs end to end and prints one JSON object (no timing asserted).

Run as a real process, as operators run it (its logging set-up stays out of the test run).
"""

from __future__ import annotations

import functools

import pytest

from tests.support.es_simulator import EsSimulator
from tests.support.processes import run_bench

KEYS = {"merges_per_s", "bulk_body_mb_per_s", "republish_merges_per_s", "endpoints", "backend"}


run = functools.partial(run_bench, "store")


def test_bench_store_on_the_simulator_cleans_up_after_itself():
    with EsSimulator() as simulator:
        report = run("--backend", "elasticsearch", "--es-url", simulator.url, "--endpoints", "300")
        assert KEYS <= set(report) and report["backend"] == "elasticsearch"
        assert report["publish"]["merges"] == 600
        assert simulator.index_names() == []  # only its own prefix, all deleted


@pytest.mark.slow
def test_bench_store_on_a_scratch_postgres():
    report = run("--backend", "postgres", "--endpoints", "300")
    assert KEYS <= set(report) and report["backend"] == "postgres"
    assert report["republish"]["merges"] == 600


def test_elasticsearch_needs_a_url():
    process = run("--backend", "elasticsearch", check=False)
    assert process.returncode != 0 and "--es-url" in process.stderr
