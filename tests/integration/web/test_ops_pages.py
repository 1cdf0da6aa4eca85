"""Admin pages for system resources and slow SQL (WEB-10): admins only, values escaped."""

from __future__ import annotations

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
    assert "12.500" in page.text and "old-host" not in page.text  # only recent samples
    slow = admin.get("/console/admin/slow-sql")
    assert slow.status_code == 200 and 'id="by-total"' in slow.text
    user, _ = _user_client(api)
    for path in ("/console/admin/resources", "/console/admin/slow-sql"):
        forbidden = user.get(path)
        assert forbidden.status_code == 403 and "&lt;script&gt;" not in forbidden.text
