"""Schedule parsing and fire times: cronsim in the schedule's zone, intervals, DST, catch-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from app.config import ScanSettings
from app.errors import ValidationError
from app.scan_control.schedule_rules import (
    fire_times_after,
    jitter_offset,
    latest_due,
    parse_schedule,
)

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)
LIMITS = ScanSettings()


def berlin(*args: int) -> datetime:
    return datetime(*args, tzinfo=BERLIN)


def daily_berlin(time: str = "0 3 * * *"):
    return parse_schedule({"cron": time, "timezone": "Europe/Berlin"}, LIMITS, now=NOW)


def local_days(times: list[datetime]) -> list[tuple[str, str]]:
    return [
        (t.astimezone(BERLIN).date().isoformat(), t.astimezone(BERLIN).strftime("%H:%M"))
        for t in times
    ]


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ({"cron": "61 * * * *"}, "schedule.cron"),
        ({"cron": "not a cron"}, "schedule.cron"),
        ({"cron": "0 3 * *"}, "schedule.cron"),
        ({"cron": "* * * * *"}, "schedule.cron"),  # every minute < 300 s
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "schedule.timezone"),
        ({"cron": "0 3 * * *", "timezone": "localtime"}, "schedule.timezone"),
        ({"every_seconds": 299}, "schedule.every_seconds"),
        ({"every_seconds": "3600"}, "schedule.every_seconds"),
        ({"every_seconds": 3600, "timezone": "UTC"}, "schedule.timezone"),
        ({"every_seconds": 3600, "jitter_seconds": -1}, "schedule.jitter_seconds"),
        ({"every_seconds": 3600, "jitter_seconds": 3600}, "schedule.jitter_seconds"),
        ({"every_seconds": 3600, "start_at": "yesterday"}, "schedule.start_at"),
        ({"every_seconds": 3600, "start_at": "2026-03-21T10:00:00"}, "schedule.start_at"),
        (
            {
                "every_seconds": 3600,
                "start_at": "2026-03-22T00:00:00Z",
                "end_at": "2026-03-21T00:00:00Z",
            },
            "schedule.end_at",
        ),
        ({"every_seconds": 3600, "end_at": "2020-01-01T00:00:00Z"}, "schedule.end_at"),
        ({"every_seconds": 3600, "color": "red"}, "schedule.color"),
        ({"cron": "0 3 * * *", "every_seconds": 3600}, "schedule"),
        ({}, "schedule"),
        ({"every_seconds": 3600, "start_at": "0001-01-01T00:00:00+14:00"}, "schedule.start_at"),
        ({"every_seconds": 3600, "end_at": "9999-12-31T23:59:59-14:00"}, "schedule.end_at"),
        ({"cron": "0 3 * * *", "start_at": "9999-12-31T20:00:00Z"}, "schedule.start_at"),
        ({"cron": "0 0 30 2 *"}, "schedule.cron"),  # never fires
        ({"cron": "@daily"}, "schedule.cron"),
        ({"cron": "0 3 * * *", "timezone": 5}, "schedule.timezone"),
        ("0 3 * * *", "schedule"),
    ],
)
def test_bad_schedules_name_the_field(value, field):
    with pytest.raises(ValidationError) as caught:
        parse_schedule(value, LIMITS, now=NOW)
    assert caught.value.status == 400
    assert caught.value.code == "invalid_schedule"
    assert caught.value.details["field"] == field


def test_null_removes_and_minimum_follows_the_setting():
    assert parse_schedule(None, LIMITS, now=NOW) is None
    low = ScanSettings(min_schedule_seconds=2)
    spec = parse_schedule({"every_seconds": 2}, low, now=NOW)
    assert spec is not None and spec.every_seconds == 2
    assert parse_schedule({"cron": "* * * * *"}, ScanSettings(min_schedule_seconds=60), now=NOW)


def test_cron_defaults_to_utc_and_fires_after_now():
    spec = parse_schedule({"cron": "0 3 * * *"}, LIMITS, now=NOW)
    assert spec.timezone == "UTC"
    assert fire_times_after(spec, NOW, 2) == [
        datetime(2026, 3, 21, 3, tzinfo=UTC),
        datetime(2026, 3, 22, 3, tzinfo=UTC),
    ]


def test_interval_counts_from_when_it_was_set_or_from_start_at():
    spec = parse_schedule({"every_seconds": 3600}, LIMITS, now=NOW)
    assert fire_times_after(spec, NOW, 2) == [NOW + timedelta(hours=1), NOW + timedelta(hours=2)]
    # Asked again later, the grid is the same (anchored), not shifted to "now".
    later = NOW + timedelta(minutes=90)
    assert fire_times_after(spec, later, 1) == [NOW + timedelta(hours=2)]
    start = "2026-03-25T08:00:00Z"
    spec = parse_schedule({"every_seconds": 3600, "start_at": start}, LIMITS, now=NOW)
    assert fire_times_after(spec, NOW, 2) == [
        datetime(2026, 3, 25, 8, tzinfo=UTC),
        datetime(2026, 3, 25, 9, tzinfo=UTC),
    ]


def test_end_at_stops_fire_times():
    spec = parse_schedule(
        {"every_seconds": 3600, "end_at": "2026-03-20T14:30:00Z"}, LIMITS, now=NOW
    )
    assert fire_times_after(spec, NOW, 5) == [NOW + timedelta(hours=1), NOW + timedelta(hours=2)]
    assert fire_times_after(spec, NOW + timedelta(hours=2), 5) == []


def test_cron_start_at_is_respected():
    spec = parse_schedule(
        {"cron": "0 3 * * *", "timezone": "Europe/Berlin", "start_at": "2026-04-01T00:00:00Z"},
        LIMITS,
        now=NOW,
    )
    assert local_days(fire_times_after(spec, NOW, 1)) == [("2026-04-01", "03:00")]


@pytest.mark.parametrize("expression", ["0 3 * * *", "30 2 * * *", "0 2 * * *"])
def test_spring_forward_neither_skips_nor_doubles_a_day(expression):
    spec = daily_berlin(expression)
    times = fire_times_after(spec, berlin(2026, 3, 27, 12), 4)
    days = [d for d, _ in local_days(times)]
    assert days == ["2026-03-28", "2026-03-29", "2026-03-30", "2026-03-31"]
    # The day of the change is 23 hours long: consecutive fire times stay one day apart
    # in wall-clock terms, and the night of 29 March still gets its run.
    assert len(set(times)) == 4


@pytest.mark.parametrize("expression", ["0 3 * * *", "30 2 * * *", "0 2 * * *"])
def test_fall_back_neither_skips_nor_doubles_a_day(expression):
    spec = daily_berlin(expression)
    times = fire_times_after(spec, berlin(2026, 10, 23, 12), 4)
    days = [d for d, _ in local_days(times)]
    assert days == ["2026-10-24", "2026-10-25", "2026-10-26", "2026-10-27"]


def test_fall_back_ambiguous_hour_fires_once_even_when_asked_inside_it():
    spec = daily_berlin("30 2 * * *")
    first = fire_times_after(spec, berlin(2026, 10, 24, 12), 1)[0]
    assert first == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # 02:30 CEST
    # Walking on from the first 02:30 (CEST) must not return the second 02:30 (CET).
    following = fire_times_after(spec, first, 1)[0]
    assert local_days([following]) == [("2026-10-26", "02:30")]


def test_latest_due_collapses_missed_slots_into_one():
    spec = parse_schedule({"every_seconds": 600}, LIMITS, now=NOW)
    first = fire_times_after(spec, NOW, 1)[0]
    latest, missed = latest_due(spec, first, first + timedelta(minutes=35))
    assert latest == first + timedelta(minutes=30)
    assert missed == 3
    assert latest_due(spec, first, first) == (first, 0)
    cron = daily_berlin()
    first = fire_times_after(cron, berlin(2026, 3, 27, 12), 1)[0]
    latest, missed = latest_due(cron, first, berlin(2026, 3, 31, 4))
    assert local_days([latest]) == [("2026-03-31", "03:00")]
    assert missed == 3


def test_jitter_is_stable_and_bounded():
    fire_at = NOW + timedelta(hours=1)
    offsets = {jitter_offset(7, fire_at, 60) for _ in range(3)}
    assert len(offsets) == 1
    assert timedelta(0) <= offsets.pop() <= timedelta(seconds=60)
    spread = {jitter_offset(task, fire_at, 60) for task in range(50)}
    assert len(spread) > 10
    assert jitter_offset(7, fire_at, 0) == timedelta(0)
