"""Business-day arithmetic for traffic rollups: buckets, business dates, nginx time fields.

Everything is kept as integer UTC epoch seconds while aggregating (cheap to hash
and compare); dates and ISO strings appear only when rows are rendered. A
5-minute bucket is ``epoch - epoch % 300``; that is also a 5-minute boundary in
the business zone because every real UTC offset is a multiple of 15 minutes,
so a 5-minute bucket never straddles a business day. A day bucket runs from
local midnight to the next local midnight in the business zone (23 or 25 hours
on DST changes for IANA zones).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone, tzinfo

from app.timezones import parse_timezone

FIVE_MINUTES = 300
GRANULARITIES = ("5m", "day")

_MONTHS = {
    b"Jan": 1,
    b"Feb": 2,
    b"Mar": 3,
    b"Apr": 4,
    b"May": 5,
    b"Jun": 6,
    b"Jul": 7,
    b"Aug": 8,
    b"Sep": 9,
    b"Oct": 10,
    b"Nov": 11,
    b"Dec": 12,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_nginx_time(field: bytes) -> int:
    """``01/Aug/2026:09:00:00 +0800`` → UTC epoch seconds; ValueError when it is not one."""
    if len(field) != 26 or field[2:3] != b"/" or field[6:7] != b"/" or field[20:21] != b" ":
        raise ValueError("not an nginx $time_local")
    month = _MONTHS.get(field[3:6])
    if month is None:
        raise ValueError("unknown month")
    sign = field[21:22]
    if sign not in (b"+", b"-"):
        raise ValueError("bad offset sign")
    local = datetime(
        int(field[7:11]),
        month,
        int(field[0:2]),
        int(field[12:14]),
        int(field[15:17]),
        int(field[18:20]),
        tzinfo=UTC,
    )
    offset = int(field[22:24]) * 3600 + int(field[24:26]) * 60
    if sign == b"-":
        offset = -offset
    return int((local - _EPOCH).total_seconds()) - offset


def iso_utc(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class BusinessCalendar:
    """Day boundaries and business dates in one configured zone (cached: hot path)."""

    def __init__(self, zone: str | tzinfo):
        self.tz = parse_timezone(zone) if isinstance(zone, str) else zone
        # Fixed offsets (the common case, +08:00) need no zone database look-ups.
        self._fixed_offset: int | None = None
        if isinstance(self.tz, timezone):
            self._fixed_offset = int(self.tz.utcoffset(None).total_seconds())
        self._day_start_cache: dict[int, int] = {}

    def day_start(self, epoch: int) -> int:
        """UTC epoch of the local midnight that starts the business day containing ``epoch``."""
        if self._fixed_offset is not None:
            off = self._fixed_offset
            return (epoch + off) // 86400 * 86400 - off
        slot = epoch // 900
        cached = self._day_start_cache.get(slot)
        if cached is None:
            local = datetime.fromtimestamp(epoch, self.tz)
            cached = self.midnight(local.date())
            self._day_start_cache[slot] = cached
        return cached

    def midnight(self, day: date) -> int:
        """UTC epoch of local midnight at the start of ``day``."""
        if self._fixed_offset is not None:
            return (day - date(1970, 1, 1)).days * 86400 - self._fixed_offset
        local = datetime(day.year, day.month, day.day, tzinfo=self.tz)
        return int(local.timestamp())

    def day_end(self, day_start_epoch: int) -> int:
        return self.midnight(self.business_date(day_start_epoch) + timedelta(days=1))

    def business_date(self, epoch: int) -> date:
        if self._fixed_offset is not None:
            return date(1970, 1, 1) + timedelta(days=(epoch + self._fixed_offset) // 86400)
        return datetime.fromtimestamp(epoch, self.tz).date()

    def today(self, now: float) -> date:
        return self.business_date(int(now))

    def bucket_end(self, granularity: str, bucket_start: int) -> int:
        if granularity == "5m":
            return bucket_start + FIVE_MINUTES
        return self.day_end(bucket_start)
