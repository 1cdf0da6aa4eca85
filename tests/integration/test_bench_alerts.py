"""`netmap bench alerts` runs end to end as a real process (no timing asserted):
its own scratch PostgreSQL, a change set, 10 rules, 3 channels, every digest delivered
to its local receiver with a valid signature."""

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
