"""`netmap bench report` runs end to end and prints one JSON object (no timing asserted).

Run as a real process on its own scratch PostgreSQL: capture holds, reports made
through both the builtin renderer and a built release in its worker process, and
every mail handed to a local SMTP server.
"""

from __future__ import annotations

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_report_measures_both_renderers_and_mail():
    report = run_bench("report", "--endpoints", "200", "--captures", "3", "--reports", "2")
    assert report["benchmark"] == "report" and len(report["sizes"]) == 1
    size = report["sizes"][0]
    assert size["endpoints"] == 200 and size["capture_hold"]["count"] == 3
    assert set(size["end_to_end"]) == {"builtin", "worker"}
    for renderer in ("builtin", "worker"):
        assert size["end_to_end"][renderer]["reports"] == 2
        assert size["end_to_end"][renderer]["reports_per_minute"] > 0
    # Two recipients per report, four reports: every delivery went through SMTP.
    assert size["mail"] == {
        "transport": "smtp",
        "mails": 8,
        "mails_per_s": size["mail"]["mails_per_s"],
    }
