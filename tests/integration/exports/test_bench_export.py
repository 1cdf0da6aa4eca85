"""`netmap bench export` runs end to end and prints one JSON object (no timing asserted).

Run as a real process, as operators run it: it starts its own scratch PostgreSQL
(and, for S3, moto's server), builds every format, deletes in repeated rounds and
removes everything.
"""

from __future__ import annotations

import functools
import json

import pytest

from tests.support.processes import run_bench

run = functools.partial(run_bench, "export", check=False)


def _check_deletes(report: dict, *, objects: int, repeats: int) -> dict:
    deletes = report["delete_throughput"]
    assert (report["delete_objects"], report["delete_repeats"]) == (objects, repeats)
    for name in ("c1", "c3", "c8"):
        entry = deletes[name]
        assert entry["deleted"] == objects * repeats and entry["failed"] == 0
        assert len(entry["objects_per_s_runs"]) == repeats
        # The figure is the median of the rounds, not one lucky round.
        ordered = sorted(entry["objects_per_s_runs"])
        assert ordered[0] <= entry["objects_per_s"] <= ordered[-1]
    assert len(deletes["c3"]["speedup_vs_c1_runs"]) == repeats
    return deletes


# Enough rows that the database's share of a build is measurable: its CPU time is read in
# clock ticks (10 ms) and printed to the hundredth of a second, and 400 rows took under
# 5 ms on a fast machine, so the figure could round to 0.
ENDPOINTS = 8000


@pytest.mark.slow
def test_bench_export_builds_every_format_and_measures_the_database_cpu():
    process = run(
        "--endpoints", str(ENDPOINTS), "--formats", "csv,jsonl,zip", "--page-size", "200",
        "--delete-objects", "12", "--delete-repeats", "3",
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert set(report["builds"]) == {"csv", "jsonl", "zip"}
    for build in report["builds"].values():
        assert build["rows"] == ENDPOINTS and build["bytes"] > 0
        assert build["database_cpu_seconds"] > 0  # the server wrote the text
    deletes = _check_deletes(report, objects=12, repeats=3)
    assert "cpu_bound_max_speedup" not in deletes  # no store server of its own here


@pytest.mark.slow
def test_bench_export_against_moto_measures_both_sides_of_every_delete():
    pytest.importorskip("moto.server")
    process = run(
        "--endpoints", "50", "--formats", "zip", "--backend", "s3",
        "--delete-objects", "10", "--delete-repeats", "2",
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["backend"] == "s3" and report["builds"]["zip"]["rows"] == 50
    deletes = _check_deletes(report, objects=10, repeats=2)
    for name in ("c1", "c3", "c8"):
        assert deletes[name]["server_cpu_ms_per_delete"] > 0
        assert deletes[name]["client_cpu_ms_per_delete"] > 0
    assert deletes["cpu_bound_max_speedup"] > 0
