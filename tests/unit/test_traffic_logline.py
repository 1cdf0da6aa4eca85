"""nginx line parsing (TRF-1): fields, status classes, unknown sizes, malformed and long lines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from app.traffic.business_time import BusinessCalendar, parse_nginx_time
from app.traffic.logline import STATUS_OTHER, LineAggregator, ParsedLine, parse_line
from tests.support.nginx_logs import CST, nginx_line

WHEN = datetime(2026, 8, 1, 10, 7, 30, tzinfo=CST)


def parse(text: str, **kwargs):
    return parse_line(text.rstrip("\n").encode(), **kwargs)


def test_combined_line_with_extras():
    parsed = parse(nginx_line(WHEN, "/img/a.webp?sig=secret&x=1", body_bytes=100, bytes_sent=350))
    assert parsed == ParsedLine(
        epoch=int(WHEN.timestamp()),
        method=b"GET",
        path=b"/img/a.webp",  # the query string (signed-URL tokens) is dropped
        status_slot=5,  # 2xx
        response_bytes=350,  # bytes_sent wins over $body_bytes_sent
        request_bytes=42,
    )


def test_status_classes_and_other():
    slots = [parse(nginx_line(WHEN, status=s)).status_slot for s in (101, 204, 304, 499, 503)]
    assert slots == [4, 5, 6, 7, 8]
    assert parse(nginx_line(WHEN, status=0)).status_slot == STATUS_OTHER
    assert parse(nginx_line(WHEN, status=600)).status_slot == STATUS_OTHER


def test_unknown_request_length_is_unknown_not_zero():
    assert parse(nginx_line(WHEN, request_length=None)).request_bytes is None
    line = nginx_line(WHEN).replace(" request_length=42", "")
    assert parse(line).request_bytes is None


def test_missing_bytes_sent_falls_back_to_body_bytes():
    assert parse(nginx_line(WHEN, body_bytes=777, bytes_sent=None)).response_bytes == 777


def test_garbage_request_line_still_counts_as_dash():
    line = nginx_line(WHEN).replace('"GET /asset.webp HTTP/1.1"', '"\\x16\\x03\\x01\\x02"')
    parsed = parse(line)
    assert (parsed.method, parsed.path) == (b"-", b"-")
    weird = nginx_line(WHEN, method="G{ET")
    assert parse(weird).method == b"-"


def test_malformed_lines():
    assert parse("") == "malformed"
    assert parse("not a log line at all") == "malformed"
    broken_time = nginx_line(WHEN).replace("/Aug/", "/Foo/")
    assert parse(broken_time) == "malformed"
    no_status = nginx_line(WHEN).replace(" 200 100 ", " - ")
    assert parse(no_status) == "malformed"


def test_long_lines_are_oversized_and_long_paths_cut():
    long_line = nginx_line(WHEN, "/" + "a" * 400)
    assert parse(long_line, max_line_bytes=256) == "oversized"
    cut = parse(nginx_line(WHEN, "/" + "b" * 100), max_path_bytes=16)
    assert cut.path == b"/" + b"b" * 15 + b"..."


def test_time_offsets_and_business_days():
    assert parse_nginx_time(b"01/Aug/2026:00:00:00 +0800") == int(
        datetime(2026, 7, 31, 16, tzinfo=UTC).timestamp()
    )
    assert parse_nginx_time(b"31/Jul/2026:20:30:00 -0330") == int(
        datetime(2026, 8, 1, 0, 0, tzinfo=UTC).timestamp()
    )
    calendar = BusinessCalendar("+08:00")
    late_evening = int(datetime(2026, 7, 31, 23, 59, 59, tzinfo=CST).timestamp())
    assert calendar.business_date(late_evening).isoformat() == "2026-07-31"
    assert calendar.day_start(late_evening) == int(datetime(2026, 7, 31, tzinfo=CST).timestamp())
    new_york = BusinessCalendar("America/New_York")
    dst_day = new_york.midnight(datetime(2026, 3, 8).date())
    assert new_york.day_end(dst_day) - dst_day == 23 * 3600


def _aggregate_reference(lines: list[bytes], max_line: int, max_path: int):
    sums: dict = {}
    malformed = oversized = 0
    for line in lines:
        parsed = parse_line(line, max_line_bytes=max_line, max_path_bytes=max_path)
        if parsed == "malformed":
            malformed += 1
            continue
        if parsed == "oversized":
            oversized += 1
            continue
        key = (parsed.epoch - parsed.epoch % 300, parsed.method, parsed.path)
        row = sums.setdefault(key, [0] * 10)
        row[0] += parsed.response_bytes
        row[3] += 1
        row[parsed.status_slot] += 1
        if parsed.request_bytes is not None:
            row[1] += parsed.request_bytes
            row[2] += 1
    return sums, malformed, oversized


_fragments = st.sampled_from(
    ['"', " ", "[", "]", "-", "?", "=", "request_length=", "bytes_sent=", "x", "\\x22", "\t"]
)


@st.composite
def log_lines(draw):
    minute = draw(st.integers(0, 600))
    when = datetime(2026, 8, 1, tzinfo=timezone(timedelta(hours=draw(st.integers(-12, 12)))))
    text = nginx_line(
        when + timedelta(minutes=minute, seconds=draw(st.integers(0, 59))),
        draw(st.sampled_from(["/", "/a", "/a/b.webp", "/x?y=1", "/" + "p" * 60, "?only=q"])),
        method=draw(st.sampled_from(["GET", "POST", "HEAD", "M-SEARCH", "BAD{", ""])),
        status=draw(st.sampled_from([0, 101, 200, 206, 301, 404, 499, 500, 999])),
        body_bytes=draw(st.integers(0, 10**9)),
        request_length=draw(st.one_of(st.none(), st.integers(0, 10**6))),
        bytes_sent=draw(st.one_of(st.none(), st.just(-1), st.integers(0, 10**9))),
    ).rstrip("\n")
    if draw(st.booleans()):
        # Damage the line somewhere: the two parsers must still agree.
        position = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 5))
        text = text[:position] + draw(_fragments) + text[position + cut :]
    return text.encode()


@settings(max_examples=200, deadline=None)
@given(st.lists(log_lines(), max_size=30), st.integers(120, 400), st.integers(4, 80))
def test_fast_aggregator_agrees_with_reference_parser(lines, max_line, max_path):
    aggregator = LineAggregator(max_line_bytes=max_line, max_path_bytes=max_path)
    aggregator.feed(lines)
    expected, malformed, oversized = _aggregate_reference(lines, max_line, max_path)
    assert aggregator.buckets == expected
    assert (aggregator.malformed, aggregator.oversized) == (malformed, oversized)
    assert aggregator.lines == len(lines)


def test_seconds_of_a_cached_minute_are_still_checked_like_the_reference():
    base = nginx_line(datetime(2026, 8, 1, 9, 4, 0, tzinfo=timezone(timedelta(hours=8))))
    stamp = "01/Aug/2026:09:04:00 +0800"
    variants = ["00", "05", "59", "60", " 5", "5 ", "+5", "ab", "00"]
    lines = [
        base.replace(stamp, stamp[:18] + s + stamp[20:]).rstrip("\n").encode() for s in variants
    ]
    # The same minute in another zone and a later minute in the same bucket.
    lines.append(base.replace("+0800", "+0530").rstrip("\n").encode())
    lines.append(base.replace("09:04:00", "09:03:17").rstrip("\n").encode())
    aggregator = LineAggregator()
    aggregator.feed(lines)
    expected, malformed, oversized = _aggregate_reference(lines, 16384, 1024)
    assert aggregator.buckets == expected
    assert (aggregator.malformed, aggregator.oversized) == (malformed, oversized)
    assert malformed >= 2  # "60" and "ab" are not seconds


@settings(max_examples=150, deadline=None)
@given(st.lists(log_lines(), min_size=1, max_size=20), st.integers(4, 80), st.integers(1, 5))
def test_cached_request_lines_across_batches_agree_with_reference_parser(lines, max_path, parts):
    # Every line three times, in several batches: the second and third sighting of a
    # request line come from the aggregator's request cache, in later feeds as well.
    repeated = lines * 3
    aggregator = LineAggregator(max_line_bytes=400, max_path_bytes=max_path)
    size = -(-len(repeated) // parts)
    for start in range(0, len(repeated), size):
        aggregator.feed(repeated[start : start + size])
    expected, malformed, oversized = _aggregate_reference(repeated, 400, max_path)
    assert aggregator.buckets == expected
    assert (aggregator.malformed, aggregator.oversized) == (malformed, oversized)


def test_default_tail_shortcut_reads_the_numbers_the_general_rules_read():
    base = nginx_line(WHEN, request_length=420, bytes_sent=1580).rstrip("\n")
    tail = " request_length=420 bytes_sent=1580"
    assert base.endswith(tail)
    variants = [
        tail,
        " request_length=0420 bytes_sent=001580",
        " request_length=- bytes_sent=1580",
        " request_length=420 bytes_sent=-",
        " request_length=420 bytes_sent=1580\r",
        " request_length=420 bytes_sent=1580 upstream=1",
        " bytes_sent=1580 request_length=420",
        " request_length=420  bytes_sent=1580",
        " request_length=420 bytes_sent=1580 bytes_sent=7",
        " request_length=4\t20 bytes_sent=15 80",
        "",
    ]
    lines = [(base[: -len(tail)] + variant).encode() for variant in variants]
    aggregator = LineAggregator()
    aggregator.feed(lines)
    expected, malformed, oversized = _aggregate_reference(lines, 16384, 1024)
    assert aggregator.buckets == expected
    assert (aggregator.malformed, aggregator.oversized) == (malformed, oversized)
