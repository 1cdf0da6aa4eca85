"""Partial sums and rollup rows: keys, adding sums, and the row shape (TRF-2).

A *partial key* is ``(granularity, bucket_start_epoch, method, path)`` within one
domain; its *sums* are the ten counters of ``logline`` (response bytes, request
bytes, lines with a known request length, requests, status classes). One log
file's reading yields sums per key for 5-minute buckets; the day sums are
derived from them (a 5-minute bucket never straddles a business day), so a line
is parsed once for both granularities. A published row is the sum of every
file's partial sums for its key, rendered in the API's row shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime
from operator import add

from app.traffic.business_time import BusinessCalendar, iso_utc
from app.traffic.logline import STATUS_BASE, STATUS_NAMES

PartialKey = tuple[str, int, str, str]  # granularity, bucket start (epoch), method, path
Sums = list[int]


def add_into(target: Sums, source: Iterable[int]) -> None:
    target[:] = map(add, target, source)


def decode_path(raw: bytes, max_path_bytes: int) -> str:
    text = raw.decode("utf-8", "replace")
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")  # PostgreSQL text cannot hold NUL
    limit = max_path_bytes + 3  # room for the "..." that marks a cut path
    encoded = text.encode()
    if len(encoded) > limit:
        text = encoded[:limit].decode("utf-8", "ignore")
    return text


def partials_from_buckets(
    buckets: dict[tuple[int, bytes, bytes], list[int]],
    calendar: BusinessCalendar,
    max_path_bytes: int,
) -> dict[PartialKey, Sums]:
    """5-minute sums keyed by bytes → 5-minute and day partial sums keyed by text."""
    partials: dict[PartialKey, Sums] = {}
    methods: dict[bytes, str] = {}
    paths: dict[bytes, str] = {}
    for (bucket, raw_method, raw_path), sums in buckets.items():
        method = methods.get(raw_method)
        if method is None:
            method = methods[raw_method] = raw_method.decode("ascii", "replace")
        path = paths.get(raw_path)
        if path is None:
            path = paths[raw_path] = decode_path(raw_path, max_path_bytes)
        for key in (
            ("5m", bucket, method, path),
            ("day", calendar.day_start(bucket), method, path),
        ):
            existing = partials.get(key)
            if existing is None:
                partials[key] = list(sums)
            else:
                add_into(existing, sums)
    return partials


class RowRenderer:
    """Renders rows in the API shape; per-bucket fields are computed once per bucket."""

    def __init__(self, calendar: BusinessCalendar, *, source_server: str, generated_at: float):
        self.calendar = calendar
        self.source_server = source_server
        self.generated_at = generated_at
        self.generated_text = (
            datetime.fromtimestamp(generated_at, UTC).isoformat().replace("+00:00", "Z")
        )
        self._buckets: dict[tuple[str, int], tuple[str, str, str, bool]] = {}

    def _bucket(self, granularity: str, start: int) -> tuple[str, str, str, bool]:
        cached = self._buckets.get((granularity, start))
        if cached is None:
            end = self.calendar.bucket_end(granularity, start)
            cached = (
                iso_utc(start),
                iso_utc(end),
                self.calendar.business_date(start).isoformat(),
                # A day row is frozen once its business day is over.
                granularity == "day" and end <= self.generated_at,
            )
            if len(self._buckets) > 100_000:
                self._buckets.clear()
            self._buckets[(granularity, start)] = cached
        return cached

    def bucket_fields(self, granularity: str, start: int) -> tuple[int, date, bool]:
        """(bucket end epoch, business date, frozen) of a bucket, for rows written in SQL."""
        end = self.calendar.bucket_end(granularity, start)
        frozen = granularity == "day" and end <= self.generated_at
        return end, self.calendar.business_date(start), frozen

    def row(self, domain: str, key: PartialKey, sums: Iterable[int]) -> dict:
        granularity, start, method, path = key
        values = list(sums)
        bucket_start, bucket_end, business_date, frozen = self._bucket(granularity, start)
        return {
            "bucket_start": bucket_start,
            "bucket_end": bucket_end,
            "business_date": business_date,
            "granularity": granularity,
            "domain": domain,
            "method": method,
            "path": path,
            "response_bytes": values[0],
            "request_bytes": values[1] if values[2] else None,
            "request_bytes_known_count": values[2],
            "total_requests": values[3],
            "status_counts": dict(zip(STATUS_NAMES, values[STATUS_BASE + 1 :], strict=True)),
            "source_server": self.source_server,
            "generated_at": self.generated_text,
            "frozen": frozen,
        }
