"""`netmap bench agent` runs end to end and prints one JSON object (no timing asserted).

A real process, as operators run it: generated nmap XML and masscan JSON are
parsed in fresh processes, then the XML is replayed by the agent loop against
a local server on a scratch database until every observation is confirmed.
"""

from __future__ import annotations

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_agent_parses_both_formats_and_confirms_every_observation():
    report = run_bench("agent", "--hosts", "30", "--ports-per-host", "7", "--batch-size", "50")
    assert report["benchmark"] == "agent" and report["observations"] == 210
    for fmt in ("nmap-xml", "masscan-json"):
        assert report[fmt]["parse"]["observations"] == 210
        assert report[fmt]["parse_tenth_of_hosts"]["observations"] == 21
        assert report[fmt]["parse"]["observations_per_second"] > 0
        assert report[fmt]["rss_ratio_full_vs_tenth"] > 0
    end_to_end = report["end_to_end"]
    assert end_to_end["confirmed_observations"] == 210
    assert end_to_end["batch_size"] == 50
