"""`netmap bench pages` runs end to end and times every console page (no timing asserted).

Run as a real process, as operators run it: its own scratch PostgreSQL, current
assets seeded set-based, traffic rollups, then every page through the Flask app.
"""

from __future__ import annotations

import functools
import json

import pytest

from tests.support.processes import run_bench

PAGES = {
    "dashboard", "tasks", "task", "results", "results_page_2", "assets", "assets_page_2",
    "assets_service", "assets_cidr", "assets_text", "assets_port", "asset_history", "changes",
    "exports", "reports", "traffic", "traffic_day", "scanners", "users", "renderer",
    "resources", "slow_sql", "assets_sort_port_desc", "assets_sort_last_seen",
    "assets_sort_service", "assets_sort_last_seen_port", "assets_sort_port_desc_page_2",
    "assets_sort_last_seen_page_2",
}  # fmt: skip

run = functools.partial(run_bench, "pages", check=False)


@pytest.mark.slow
def test_bench_pages_times_every_page():
    process = run("--assets", "3000", "--results", "600", "--repeats", "2")
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "pages" and report["assets"] == 3000
    assert set(report["pages"]) == PAGES
    for timing in report["pages"].values():
        assert timing["count"] == 2 and timing["p95_ms"] > 0
    assert report["max_p95_ms"] == max(t["p95_ms"] for t in report["pages"].values())
    assert set(report["api"]) == {"results_500", "assets_500"}
    for timing in report["api"].values():
        assert timing["count"] == 2 and timing["p95_ms"] > 0 and timing["cpu_p50_ms"] >= 0
    # The results page holds at most 500 of the task's 600 endpoints; the assets page 500.
    assert report["api"]["results_500"]["items"] == 500
    assert report["api"]["assets_500"]["items"] == 500
