"""Admin pages for system resources and slow SQL (WEB-10): admins only, values escaped."""

from __future__ import annotations

import re

import sqlalchemy as sa

from app.db import transaction
from tests.integration.web.test_console_pages import XSS, _user_client


def test_resources_and_slow_sql_pages_are_admin_tables(api) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO ops_resource_samples (sampled_at, host, metric, process, value) "
                "VALUES (now(), :host, 'cpu_percent', 'web', 12.5), "
                "(now() - interval '1 hour', 'old-host', 'cpu_percent', 'web', 99)"
            ),
            {"host": XSS},
        )
    admin, _ = _user_client(api, admin=True)
    page = admin.get("/console/admin/resources")
    assert page.status_code == 200
    assert "<script>alert" not in page.text and "&lt;script&gt;alert" in page.text
    assert "12.5 %" in page.text and "old-host" not in page.text  # only recent samples
    slow = admin.get("/console/admin/slow-sql")
    assert slow.status_code == 200 and 'id="by-total"' in slow.text
    user, _ = _user_client(api)
    for path in ("/console/admin/resources", "/console/admin/slow-sql"):
        forbidden = user.get(path)
        assert forbidden.status_code == 403 and "&lt;script&gt;" not in forbidden.text


def test_resource_values_have_units_and_are_plotted(api) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                """
                INSERT INTO ops_resource_samples (sampled_at, host, metric, process, value)
                SELECT now() - make_interval(mins => m), 'h1', 'process_rss_bytes', 'web:41',
                       (400 + m) * 1048576.0
                  FROM generate_series(0, 50, 5) AS m
                UNION ALL
                SELECT now() - make_interval(mins => m), 'h1', 'process_rss_bytes', 'runner:40',
                       90 * 1048576.0
                  FROM generate_series(0, 50, 5) AS m
                UNION ALL
                SELECT now() - make_interval(mins => m), 'h1', 'memory_used_percent', '', 37.5
                  FROM generate_series(0, 50, 5) AS m
                UNION ALL
                SELECT now(), 'h1', 'disk_read_bytes_per_second', '', 1572864
                """
            )
        )
    admin, _ = _user_client(api, admin=True)
    page = admin.get("/console/admin/resources")
    assert page.status_code == 200
    text = page.text
    # The table: values with units, metrics in words.
    assert "400.0 MiB" in text and "90.0 MiB" in text
    assert "37.5 %" in text and "1.5 MiB/s" in text
    assert "Memory (resident)" in text and str(400 * 1048576) not in text
    # The charts: memory per process in MiB with one line each, host percentages to 100.
    memory = re.search(r'<svg[^>]*id="resources-chart-1".*?</svg>', text, re.S).group(0)
    assert "Memory of this instance&#39;s processes (MiB)" in memory
    lines = re.findall(r'<polyline class="series (s\d)" points="([^"]+)"', memory)
    assert [css for css, _ in lines] == ["s0", "s1"] and all(
        len(points.split()) == 11 for _, points in lines
    )
    y_labels = re.findall(r'<text class="y-label"[^>]*>([^<]*)</text>', memory)
    assert y_labels == ["0", "250", "500"]
    assert re.findall(r'<span class="legend (s\d)">([^<]*)</span>', text)[:2] == [
        ("s0", "web:41"),
        ("s1", "runner:40"),
    ]
    host = re.search(r'<svg[^>]*id="resources-chart-3".*?</svg>', text, re.S).group(0)
    assert re.findall(r'<text class="y-label"[^>]*>([^<]*)</text>', host) == ["0", "50", "100"]
    assert "Host memory used: latest 37.5 %" in host

    series = admin.get("/api/system/resources?metric=process_rss_bytes,memory_used_percent")
    units = {(e["metric"], e["unit"]) for e in series.get_json()["series"]}
    assert units == {("process_rss_bytes", "bytes"), ("memory_used_percent", "percent")}
