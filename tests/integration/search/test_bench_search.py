"""`netmap bench search` runs end to end as a real process (no timing asserted): its own
scratch PostgreSQL, the seeded assets, and with ``--hostnames`` every host named and the
rare host name searched too."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_search_with_named_hosts_times_the_rare_host_name():
    # 100,000 assets: five services on each of 20,000 hosts, 10.0.77.7 among them.
    process = run_bench(
        "search", "--assets", "100000", "--repeats", "1", "--hostnames", check=False
    )
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "search" and report["assets"] == 100_000
    assert report["named_hosts"] == 100_000
    queries = report["queries"]
    assert {"free_text_host_rare", "free_text_host_port", "cert_subject_rare"} <= set(queries)
    for timing in queries.values():
        assert timing["p95_ms"] >= timing["p50_ms"] > 0
    # The host's five endpoints (its name, not 10.0.77.70's), and of them its port 22.
    assert queries["free_text_host_rare"]["rows"] == 5
    assert queries["free_text_host_port"]["rows"] == 1
