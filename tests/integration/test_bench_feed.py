"""`netmap bench feed` runs end to end as a real process (no timing asserted): its own
scratch PostgreSQL, two owners' changes, every page it timed checked by the bench."""

from __future__ import annotations

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_feed_times_checked_pages_of_both_owners():
    report = run_bench("feed", "--changes", "30000", "--share", "0.05", "--repeats", "2")
    assert report["benchmark"] == "feed" and report["checked"] is True
    assert report["changes_by_owner"] == {"small": 1500, "large": 28500}
    pages = report["pages"]
    assert set(pages) == {
        f"{owner}_{kind}_{which}"
        for owner in ("small", "large")
        for kind in ("all", "gone")
        for which in ("first", "eleventh")
    }
    assert pages["large_all_eleventh"]["count"] == 2 and pages["small_all_first"]["count"] == 2
    # 1,500 changes hold about 150 gone ones: two pages, no eleventh.
    assert pages["small_gone_eleventh"] is None
    assert all(p is None or p["p50_ms"] >= 0 for p in pages.values())
