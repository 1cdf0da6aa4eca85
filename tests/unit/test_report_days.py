"""A report's new endpoints per day are days of its time zone, as its period is: the
same hour is the 8th in Kiritimati (UTC+14) and the 7th in Pago Pago (UTC-11); they
were both the UTC day."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

from app.reports.capture import _new_per_day

HOURS = SimpleNamespace(
    first_seen_hours=[
        {"hour": "2026-12-07T17:00:00+00:00", "count": 1001},
        {"hour": "2026-12-07T03:00:00+00:00", "count": 5},
    ]
)
START, END = datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 10, tzinfo=UTC)


def test_new_endpoints_per_day_are_days_of_the_report_zone():
    assert _new_per_day([HOURS.first_seen_hours], START, END, "Pacific/Kiritimati") == {
        "2026-12-07": 5,
        "2026-12-08": 1001,
    }
    assert _new_per_day([HOURS.first_seen_hours], START, END, "Pacific/Pago_Pago") == {
        "2026-12-06": 5,
        "2026-12-07": 1001,
    }
    assert _new_per_day([HOURS.first_seen_hours], START, END, "UTC") == {"2026-12-07": 1006}
