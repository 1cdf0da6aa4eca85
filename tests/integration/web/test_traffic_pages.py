"""The console's traffic page: SVG chart per domain, scoping, escaping, bad input, bounded SQL
(TRF-7, WEB-11).

Rollups are written by the traffic domain's own validated upsert (what the
runner and ``POST /api/traffic/rollups`` use); markup in a domain or path is
inserted with SQL because the validator would refuse it, which is exactly the
value a template must still print as text.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from app.db import transaction
from app.traffic.rows import upsert_rows, validate_rows
from tests.integration.web.test_console_pages import XSS, _user_client

DOMAIN = "www.example.com"
T0 = datetime(2026, 8, 1, 2, 0, tzinfo=UTC)  # 10:00 at the default business zone (+08:00)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _row(domain: str, start: datetime, path: str, requests: int, *, granularity="5m") -> dict:
    end = start + (timedelta(minutes=5) if granularity == "5m" else timedelta(days=1))
    return {
        "domain": domain,
        "granularity": granularity,
        "bucket_start": _iso(start),
        "bucket_end": _iso(end),
        "business_date": (start + timedelta(hours=8)).date().isoformat(),
        "method": "GET",
        "path": path,
        "response_bytes": requests * 1000,
        "request_bytes": requests * 100,
        "request_bytes_known_count": requests,
        "total_requests": requests,
        "status_counts": {"2xx": requests},
        "generated_at": _iso(T0),
    }


def _write(rows: list[dict]) -> None:
    with transaction() as conn:
        upsert_rows(conn, validate_rows(rows, max_rows=10_000))


def _seed_example() -> None:
    _write(
        [
            _row(DOMAIN, T0, "/", 7),
            _row(DOMAIN, T0, "/login", 5),  # same bucket: summed to 12
            _row(DOMAIN, T0 + timedelta(minutes=10), "/", 30),
            _row("api.example.com", T0, "/v1", 99),
            _row(DOMAIN, T0 - timedelta(hours=2), "/", 1, granularity="day"),
        ]
    )


def test_a_user_sees_the_chart_of_a_domain_with_its_numbers(api) -> None:
    _seed_example()
    client, _ = _user_client(api)  # not an admin: the API lets every signed-in user read
    page = client.get(f"/console/traffic?domain={DOMAIN}")
    assert page.status_code == 200, page.text
    assert 'href="/console/traffic"' in page.text  # in the navigation
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="traffic-chart"' in page.text
    assert 'role="img" aria-labelledby="traffic-chart-title traffic-chart-desc"' in page.text
    title = re.search(r'<title id="traffic-chart-title">([^<]*)</title>', page.text)
    assert title and title.group(1) == f"{DOMAIN}: traffic per 5 minutes"
    desc = re.search(r'<desc id="traffic-chart-desc">([^<]*)</desc>', page.text).group(1)
    # Default range: up to the newest bucket, from the first (the day before holds none), at
    # least an hour; the other domain's 99 are not in it.
    assert "2026-08-01 09:15 +0800 to 2026-08-01 10:15 +0800" in desc
    assert "2 buckets with traffic, 42 requests in total, at most 30" in desc
    assert "41.0 KiB sent" in desc
    # Steps over every 5-minute bucket of the hour (empty ones at zero): 12 buckets, 2 points each.
    requests_line = re.search(r'<polyline class="series requests" points="([^"]+)"', page.text)
    assert len(requests_line.group(1).split()) == 12 * 2
    assert re.findall(r'<option value="([^"]+)"', page.text)[:2] == ["api.example.com", DOMAIN]
    table = re.findall(r"<tr><td>([^<]+)</td><td class=\"number\">(\d+)</td>", page.text)
    assert table == [("2026-08-01 10:00", "12"), ("2026-08-01 10:10", "30")]

    day = client.get(f"/console/traffic?domain={DOMAIN}&granularity=day")
    assert day.status_code == 200
    assert f"{DOMAIN}: traffic per day" in day.text
    assert re.findall(r"<tr><td>([^<]+)</td><td class=\"number\">(\d+)</td>", day.text) == [
        ("2026-08-01 08:00", "1")
    ]

    ranged = client.get(
        f"/console/traffic?domain={DOMAIN}&from=2026-08-01T10:05&to=2026-08-01T11:00"
    )
    assert ranged.status_code == 200
    assert re.findall(r"<tr><td>([^<]+)</td><td class=\"number\">(\d+)</td>", ranged.text) == [
        ("2026-08-01 10:10", "30")
    ]
    empty = client.get(f"/console/traffic?domain={DOMAIN}&from=2025-01-01&to=2025-01-02")
    assert empty.status_code == 200 and 'id="traffic-empty"' in empty.text
    assert "no rollups in this range" in empty.text

    anonymous = api.app.test_client().get("/console/traffic")
    assert anonymous.status_code == 302
    assert anonymous.headers["Location"].startswith("/console/sign-in")


def test_no_rollups_yet_is_a_plain_message(api) -> None:
    client, _ = _user_client(api)
    page = client.get("/console/traffic")
    assert page.status_code == 200
    assert 'id="no-traffic"' in page.text and "<svg" not in page.text
    # It names the command's real option (there is no --post).
    assert "--endpoint URL" in page.text and "--post" not in page.text


def _labels(svg: str, css: str) -> list[str]:
    return re.findall(rf'<text class="{css}"[^>]*>([^<]*)</text>', svg)


def test_a_single_bucket_is_a_visible_chart_with_round_labels(api) -> None:
    _write([_row(DOMAIN, T0 + timedelta(minutes=15), "/", 1)])
    client, _ = _user_client(api)
    page = client.get(f"/console/traffic?domain={DOMAIN}")
    assert page.status_code == 200 and 'id="traffic-empty"' not in page.text
    desc = re.search(r'<desc id="traffic-chart-desc">([^<]*)</desc>', page.text).group(1)
    assert desc.startswith("2026-08-01 09:20 +0800 to 2026-08-01 10:20 +0800: 1 buckets")
    # The bucket is a bar of 1/12 of the plot's width at the top of the requests panel.
    line = re.search(r'<polyline class="series requests" points="([^"]+)"', page.text).group(1)
    points = [tuple(map(float, pair.split(","))) for pair in line.split()]
    top = min(y for _, y in points)
    bar = [x for x, y in points if y == top]
    assert len(bar) == 2 and round(bar[1] - bar[0]) == round((960 - 84 - 16) / 12)
    # Counts are whole numbers (no "0.5" requests, no "0.5 B"); times sit on round minutes.
    y_labels = _labels(page.text, "y-label")
    assert y_labels[:2] == ["0", "1"] and all("." not in label for label in y_labels[:2])
    x_labels = _labels(page.text, "x-label")
    times = x_labels[: len(x_labels) // 2]  # each panel repeats the time axis
    assert 2 <= len(times) <= 6
    assert all(re.fullmatch(r"(\d\d-\d\d )?\d\d:\d\d", label) for label in times), times
    assert all(int(label[-2:]) % 5 == 0 for label in times), times

    day = client.get(f"/console/traffic?domain={DOMAIN}&granularity=day")
    assert day.status_code == 200  # no day rows: the day chart says so
    _write([_row(DOMAIN, T0 - timedelta(hours=2), "/", 4, granularity="day")])
    day = client.get(f"/console/traffic?domain={DOMAIN}&granularity=day")
    line = re.search(r'<polyline class="series requests" points="([^"]+)"', day.text).group(1)
    assert len(line.split()) == 2  # one day is a bar, not a lone invisible point
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", label) for label in _labels(day.text, "x-label"))


def test_bad_arguments_are_400_naming_them(api) -> None:
    _seed_example()
    client, _ = _user_client(api)
    cases = [
        ("granularity=hourly", "granularity must be 5m or day"),
        ("from=yesterday", "from must be a date"),
        ("from=2026-08-02&to=2026-08-01", "to must be after from"),
        ("from=2026-08-01&to=2026-08-05", "a 5m chart covers at most 3 days"),
        ("granularity=day&from=2025-01-01&to=2026-08-01", "a day chart covers at most 400 days"),
        ("domain=" + "a" * 254, "domain must be at most 253 characters"),
        ("granularity=day&from=9999-12-30", "give both from and to"),
        ("to=0001-01-02T00:00", "give both from and to"),
    ]
    for query, message in cases:
        page = client.get(f"/console/traffic?{query}")
        assert page.status_code == 400, (query, page.text)
        error = re.search(r'id="traffic-error">([^<]*)<', page.text)
        assert error and message in error.group(1), (query, page.text)
        assert "<svg" not in page.text


def test_markup_in_domains_paths_and_arguments_is_text(api) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO traffic_rollups (domain, granularity, bucket_start, bucket_end, "
                "business_date, method, path, response_bytes, request_bytes_known_count, "
                "total_requests, status_2xx, generated_at) VALUES (:d, '5m', :t, "
                ":t + interval '5 minutes', '2026-08-01', 'GET', :d, 10, 0, 3, 3, now())"
            ),
            {"d": XSS, "t": T0},
        )
    client, _ = _user_client(api)
    for path in (
        "/console/traffic",  # the first (and only) domain is the one with markup
        "/console/traffic?domain=" + XSS,
        "/console/traffic?domain=" + XSS + "&from=" + XSS,  # 400: echoed in the form
    ):
        page = client.get(path)
        assert page.status_code in (200, 400), page.text
        assert "<script>alert" not in page.text and "<img src=x" not in page.text
        assert "&lt;script&gt;alert" in page.text
        assert "default-src 'self'" in page.headers["Content-Security-Policy"]
    chart = client.get("/console/traffic?domain=" + XSS)
    assert "traffic per 5 minutes</title>" in chart.text
    assert "3 requests in total" in chart.text


def _plans_of_page(engine, client, path: str) -> list[dict]:
    statements: list[tuple[str, object]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        if "traffic_rollups" in statement:
            statements.append((statement, parameters))

    sa.event.listen(engine, "before_cursor_execute", record)
    try:
        assert client.get(path).status_code == 200
    finally:
        sa.event.remove(engine, "before_cursor_execute", record)
    plans = []
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for statement, parameters in statements:
            # No OFFSET, no count over the table (counting inside a LIMITed read is bounded).
            assert not re.search(r"\bOFFSET\b", statement, re.IGNORECASE), statement
            assert not re.search(r"count\([^)]*\)[^()]*FROM traffic_rollups", statement), statement
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, parameters)
            plans.append(cursor.fetchone()[0][0]["Plan"])
        raw.rollback()
    finally:
        raw.close()
    return plans


def _nodes(plan: dict):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def test_a_page_view_reads_a_range_of_the_primary_key_not_the_table(api, engine) -> None:
    _seed_example()
    # 40 other domains, 2 days of 5-minute buckets, 2 paths each (46k rows) around it.
    with transaction() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO traffic_rollups (domain, granularity, bucket_start, bucket_end,
                       business_date, method, path, response_bytes, request_bytes_known_count,
                       total_requests, status_2xx, generated_at)
                SELECT 'd' || d || '.example.net', '5m', b, b + interval '5 minutes',
                       (b + interval '8 hours')::date, 'GET', '/p' || p, 100, 0, 1, 1, now()
                  FROM generate_series(1, 40) AS d,
                       generate_series(:t - interval '2 days', :t, interval '5 minutes') AS b,
                       generate_series(1, 2) AS p
                """
            ),
            {"t": T0},
        )
        conn.execute(sa.text("ANALYZE traffic_rollups"))
    client, _ = _user_client(api)
    plans = _plans_of_page(engine, client, f"/console/traffic?domain={DOMAIN}")
    # domains, newest, first within the default span, series
    assert len(plans) == 4, [json.dumps(p)[:200] for p in plans]
    for plan in plans:
        kinds = {node["Node Type"] for node in _nodes(plan)}
        assert "Seq Scan" not in kinds, json.dumps(plan)
        scanned = sum(
            node.get("Actual Rows", 0) * node.get("Actual Loops", 1)
            + node.get("Rows Removed by Filter", 0)
            for node in _nodes(plan)
            if node["Node Type"] in ("Index Scan", "Index Only Scan", "Bitmap Index Scan")
        )
        # Domain list: one probe per domain (42 + the end); series, newest, first: a few rows.
        assert scanned <= 50, json.dumps(plan)


def test_a_range_with_too_many_rollup_rows_stops_at_the_last_complete_bucket(
    api, monkeypatch
) -> None:
    from app.web import traffic_pages

    _write(
        [
            _row(DOMAIN, T0 + timedelta(minutes=5 * b), path, 10 * (b + 1))
            for b in range(3)
            for path in ("/a", "/b")
        ]
    )
    client, _ = _user_client(api)
    query = f"/console/traffic?domain={DOMAIN}&from=2026-08-01T10:00&to=2026-08-01T11:00"
    whole = client.get(query)
    assert 'id="traffic-cut"' not in whole.text
    assert "3 buckets with traffic, 120 requests" in whole.text

    # Five rows may be read: buckets 1 and 2 (four rows) are complete, the third is not.
    monkeypatch.setattr(traffic_pages, "MAX_ROWS", 5)
    cut = client.get(query)
    assert cut.status_code == 200
    notice = re.search(r'id="traffic-cut">([^<]*)<', cut.text).group(1)
    assert "more than 5 rollup rows" in notice and "stops before 2026-08-01 10:10" in notice
    assert "2026-08-01 10:00 +0800 to 2026-08-01 10:10 +0800: 2 buckets with traffic" in cut.text
    assert "60 requests in total" in cut.text
    table = re.findall(r"<tr><td>([^<]+)</td><td class=\"number\">(\d+)</td>", cut.text)
    assert table == [("2026-08-01 10:00", "20"), ("2026-08-01 10:05", "40")]
