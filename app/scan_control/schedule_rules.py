"""What a task schedule is: parsing, validation and fire times (docs/schedules.md).

A schedule is either a cron expression in an IANA time zone (parsed and evaluated by
cronsim, never by hand) or an interval in seconds, with an optional ``start_at``
(no fire time before it; an interval counts from it), ``end_at`` (no fire time after
it) and ``jitter_seconds`` (each slot starts up to that many seconds after its fire
time, the same offset on every evaluation, so a retried tick agrees with the first).

Fire times are computed in the schedule's zone and stored in UTC. cronsim walks
wall-clock time with tz-aware datetimes: on the spring-forward day a daily time that
does not exist fires at the first minute after the gap, on the fall-back day a daily
time that exists twice fires once; so no day is skipped and none doubled.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from app.config import ScanSettings
from app.errors import ValidationError
from app.timezones import is_iana_zone

SCHEDULE_FIELDS = frozenset(
    {"cron", "timezone", "every_seconds", "start_at", "end_at", "jitter_seconds"}
)
MAX_CRON_LENGTH = 200
MAX_JITTER_SECONDS = 86_400
MAX_EVERY_SECONDS = 366 * 86_400
# Gaps between this many consecutive cron fire times are checked against the minimum.
GAP_SAMPLE = 64
# start_at / end_at bounds: fire times far from both ends of the calendar stay computable.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(3000, 1, 1, tzinfo=UTC)
# Catch-up counts missed slots up to this many (then reports "at least" that many).
MAX_COUNTED_SLOTS = 10_000


@dataclass(frozen=True)
class ScheduleSpec:
    kind: str  # "cron" | "interval"
    cron: str | None
    timezone: str | None
    every_seconds: int | None
    start_at: datetime | None
    end_at: datetime | None
    jitter_seconds: int
    # Interval schedules count from here: start_at, or the moment the schedule was set.
    anchor_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "cron": self.cron,
            "timezone": self.timezone,
            "every_seconds": self.every_seconds,
            "start_at": _iso(self.start_at),
            "end_at": _iso(self.end_at),
            "jitter_seconds": self.jitter_seconds,
        }


def _iso(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).isoformat() if moment is not None else None


def _invalid(field: str, value: Any, reason: str) -> ValidationError:
    return ValidationError(
        f"{field}: {reason}",
        code="invalid_schedule",
        details={"field": field, "value": value, "reason": reason},
    )


def _moment(body: dict[str, Any], name: str) -> datetime | None:
    value = body.get(name)
    if value is None:
        return None
    field = f"schedule.{name}"
    if not isinstance(value, str) or len(value) > 64:
        raise _invalid(field, value, "must be an ISO 8601 date-time with a UTC offset")
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise _invalid(field, value, "must be an ISO 8601 date-time with a UTC offset") from None
    if moment.tzinfo is None:
        raise _invalid(field, value, "must carry a UTC offset (e.g. Z or +01:00)")
    if not EARLIEST <= moment < LATEST:
        raise _invalid(field, value, f"must be between {EARLIEST.year} and {LATEST.year}")
    return moment.astimezone(UTC)


def _int_field(body: dict[str, Any], name: str, *, minimum: int, maximum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid(f"schedule.{name}", value, "must be an integer")
    if value < minimum or value > maximum:
        raise _invalid(f"schedule.{name}", value, f"must be between {minimum} and {maximum}")
    return value


def parse_cron(expression: str, zone: ZoneInfo) -> None:
    """Raise ``CronSimError`` when cronsim refuses ``expression``."""
    CronSim(expression, datetime.now(zone))


def parse_schedule(value: Any, limits: ScanSettings, *, now: datetime) -> ScheduleSpec | None:
    """The request's ``schedule`` value as a spec; None for ``null`` (no schedule).

    Bad input raises ``ValidationError`` (400 ``invalid_schedule``) naming the field.
    """
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid("schedule", value, "must be an object or null")
    unknown = sorted(set(value) - SCHEDULE_FIELDS)
    if unknown:
        raise _invalid(f"schedule.{unknown[0]}", None, "unknown field")
    has_cron = value.get("cron") is not None
    has_every = value.get("every_seconds") is not None
    if has_cron == has_every:
        raise _invalid(
            "schedule", None, "give either cron (and a timezone, default UTC) or every_seconds"
        )
    minimum = limits.min_schedule_seconds
    start_at = _moment(value, "start_at")
    end_at = _moment(value, "end_at")
    if start_at is not None and end_at is not None and end_at <= start_at:
        raise _invalid("schedule.end_at", value.get("end_at"), "must be after start_at")
    if end_at is not None and end_at <= now:
        raise _invalid("schedule.end_at", value.get("end_at"), "must be in the future")
    jitter = _int_field(value, "jitter_seconds", minimum=0, maximum=MAX_JITTER_SECONDS) or 0
    if has_every:
        if value.get("timezone") is not None:
            raise _invalid("schedule.timezone", value.get("timezone"), "only with cron")
        every = _int_field(value, "every_seconds", minimum=1, maximum=MAX_EVERY_SECONDS)
        assert every is not None
        if every < minimum:
            raise _invalid(
                "schedule.every_seconds",
                every,
                f"must be at least [scan] min_schedule_seconds ({minimum})",
            )
        if jitter >= every:
            raise _invalid("schedule.jitter_seconds", jitter, "must be below every_seconds")
        return ScheduleSpec(
            kind="interval",
            cron=None,
            timezone=None,
            every_seconds=every,
            start_at=start_at,
            end_at=end_at,
            jitter_seconds=jitter,
            anchor_at=start_at or now.astimezone(UTC),
        )
    expression = value.get("cron")
    if not isinstance(expression, str) or len(expression) > MAX_CRON_LENGTH:
        raise _invalid("schedule.cron", expression, "must be a cron expression (five fields)")
    expression = " ".join(expression.split())
    zone_name = value.get("timezone")
    if zone_name is None:
        zone_name = "UTC"
    if not is_iana_zone(zone_name):
        raise _invalid("schedule.timezone", zone_name, "must be an IANA time zone name")
    zone = ZoneInfo(zone_name)
    if len(expression.split(" ")) != 5:
        raise _invalid("schedule.cron", expression, "must have five fields")
    try:
        parse_cron(expression, zone)
    except CronSimError as exc:
        raise _invalid("schedule.cron", expression, str(exc) or "invalid expression") from None
    spec = ScheduleSpec(
        kind="cron",
        cron=expression,
        timezone=zone_name,
        every_seconds=None,
        start_at=start_at,
        end_at=end_at,
        jitter_seconds=jitter,
    )
    sample = _cron_after(spec, now, GAP_SAMPLE + 1)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(sample)]
    if gaps and min(gaps) < minimum:
        raise _invalid(
            "schedule.cron",
            expression,
            f"fires {int(min(gaps))} s apart; [scan] min_schedule_seconds is {minimum}",
        )
    if gaps and jitter >= min(gaps):
        raise _invalid("schedule.jitter_seconds", jitter, "must be below the gap between fires")
    return spec


def _cron_after(spec: ScheduleSpec, after: datetime, count: int) -> list[datetime]:
    assert spec.cron is not None and spec.timezone is not None
    zone = ZoneInfo(spec.timezone)
    start = after.astimezone(zone)
    times: list[datetime] = []
    for moment in CronSim(spec.cron, start):
        utc = moment.astimezone(UTC)
        if utc <= after:  # cronsim works in wall-clock minutes; keep strictly later instants
            continue
        times.append(utc)
        if len(times) >= count:
            break
    return times


def fire_times_after(spec: ScheduleSpec, after: datetime, count: int = 1) -> list[datetime]:
    """Up to ``count`` fire times strictly after ``after`` (UTC), within start/end."""
    after = after.astimezone(UTC)
    if spec.start_at is not None and after < spec.start_at:
        # The first fire time is start_at itself when it is one.
        after = spec.start_at - timedelta(microseconds=1)
    if spec.kind == "interval":
        assert spec.every_seconds is not None and spec.anchor_at is not None
        every = timedelta(seconds=spec.every_seconds)
        if after < spec.anchor_at:
            first = spec.anchor_at if spec.start_at is not None else spec.anchor_at + every
            if first <= after:
                first += every
        else:
            steps = (after - spec.anchor_at) // every + 1
            first = spec.anchor_at + every * steps
        times = [first + every * i for i in range(count)]
    else:
        times = _cron_after(spec, after, count)
    if spec.end_at is not None:
        times = [t for t in times if t <= spec.end_at]
    return times


def next_fire_after(spec: ScheduleSpec, after: datetime) -> datetime | None:
    times = fire_times_after(spec, after, 1)
    return times[0] if times else None


def latest_due(spec: ScheduleSpec, first: datetime, now: datetime) -> tuple[datetime, int]:
    """The latest fire time at or before ``now`` starting from ``first`` (itself due), and
    how many earlier due slots it stands for (they become one catch-up run)."""
    latest, missed = first, 0
    if spec.kind == "interval":
        assert spec.every_seconds is not None
        every = timedelta(seconds=spec.every_seconds)
        steps = int((now - first) // every)
        if spec.end_at is not None:
            steps = min(steps, int((spec.end_at - first) // every))
        return first + every * max(steps, 0), max(steps, 0)
    while missed < MAX_COUNTED_SLOTS:
        following = next_fire_after(spec, latest)
        if following is None or following > now:
            return latest, missed
        latest, missed = following, missed + 1
    # Longer than MAX_COUNTED_SLOTS slots behind: jump to the last fire time before now.
    assert spec.cron is not None and spec.timezone is not None
    zone = ZoneInfo(spec.timezone)
    before = next(iter(CronSim(spec.cron, now.astimezone(zone), reverse=True)))
    return max(latest, before.astimezone(UTC)), missed


def jitter_offset(task_id: int, fire_at: datetime, jitter_seconds: int) -> timedelta:
    """The same offset in [0, jitter_seconds] for a slot every time it is computed."""
    if jitter_seconds <= 0:
        return timedelta(0)
    key = f"{task_id}:{fire_at.astimezone(UTC).isoformat()}".encode()
    value = int.from_bytes(hashlib.sha256(key).digest()[:8], "big")
    return timedelta(milliseconds=value % (jitter_seconds * 1000 + 1))
