"""`netmap bench floor` runs end to end as a real process (no timing asserted): its own
scratch PostgreSQL and web server, one scanner's upload, then the same rows written back
by COPY, checked table by table against what the upload left."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
@pytest.mark.parametrize("in_flight", [1, 3])
def test_bench_floor_copies_exactly_the_rows_the_upload_wrote(in_flight):
    process = run_bench(
        "floor", "--observations", "2000", "--batch", "500", "--repeats", "2",
        "--in-flight", str(in_flight), check=False,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "floor" and report["observations"] == 2000
    # With batches in flight together every one is still counted once (the final's
    # exact count is checked by the bench itself, which would have failed).
    assert report["in_flight"] == in_flight
    tables = report["floor"]["tables"]
    # The write path's rows, found by the statistics counters, not named by the bench.
    assert tables["search_execution_endpoints"] == 2000
    assert sum(n for t, n in tables.items() if t.startswith("search_facts_")) == 2000
    assert tables["scan_upload_receipts"] == 2000 // 500 + 1  # the batches and the final
    assert "scan_executions" not in tables and "runtime_configuration" not in tables
    assert len(report["floor"]["seconds"]) == 2
    assert report["ratio_to_floor"] > 0 and report["goal_ratio"] == 0.6
    # Where each side's CPU went: the web server, PostgreSQL and the client for netmap;
    # PostgreSQL alone for the COPY. Both did work, so neither reads zero.
    spent = report["netmap"]["cpu_ms_per_1k_observations"]
    assert set(spent) == {"web", "postgres", "client"}
    assert spent["web"] > 0 and spent["postgres"] > 0
    assert report["floor"]["cpu_ms_per_1k_observations"]["postgres"] > 0
    # The same rows once more as netmap's writes shape them (text COPY, a batch a
    # transaction); the bench fails unless that wrote exactly the upload's rows again.
    # Each writing is split by table over the same tables.
    shaped = report["text_batches"]
    assert shaped["batch"] == 500 and shaped["seconds"] > 0
    assert shaped["cpu_ms_per_1k_observations"]["postgres"] > 0
    for split in (report["floor"]["by_table_cpu_ms_per_1k"], shaped["by_table_cpu_ms_per_1k"]):
        assert set(split) == set(tables) and min(split.values()) >= 0
