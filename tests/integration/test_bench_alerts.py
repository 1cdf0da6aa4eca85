"""`netmap bench alerts` runs end to end as a real process (no timing asserted):
its own scratch PostgreSQL, a run's change set, 10 rules, 3 channels, every message
delivered to its local receiver with a valid signature, in either mode."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_alerts_evaluates_and_delivers_every_digest():
    process = run_bench("alerts", "--changes", "2000", check=False)
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "alerts" and report["changes"] == 2000
    assert report["messages"] == {"digest": 30}
    assert report["delivered"] == 30 and report["not_delivered"] == 0
    assert report["receiver_ids"] == 30 and report["bad_signatures"] == 0
    assert report["evaluation_seconds"] > 0 and report["commit_to_delivered_seconds"] > 0


@pytest.mark.slow
def test_bench_alerts_each_mode_sends_the_capped_singles_and_the_folded_digests():
    report = run_bench("alerts", "--changes", "2000", "--mode", "each")
    assert report["mode"] == "each"
    # Every rule matches more than the cap (50) of the 2000 changes: 50 single messages
    # per rule and channel, and the rest folded into one digest per rule and channel.
    assert report["messages"] == {"each": 1500, "digest": 30}
    assert report["delivered"] == 1530 and report["not_delivered"] == 0
    assert report["receiver_ids"] == 1530 and report["bad_signatures"] == 0
