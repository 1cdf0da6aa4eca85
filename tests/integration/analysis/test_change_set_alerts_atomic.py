"""A change set and its alert messages commit together (docs/alerts.md, "Evaluation").

When the messages cannot be written, the analysis's one transaction rolls back: no
change set is left without its alerts, and the retry writes both.
"""

from __future__ import annotations

import time

import sqlalchemy as sa

from app.db import transaction
from tests.support.analysis import Scans, changes_of


def _count(table: str) -> int:
    with transaction() as conn:
        return conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar()


def test_no_change_set_without_its_alerts(pg_scans: Scans) -> None:
    owner = pg_scans.owner()
    with transaction() as conn:
        channel = conn.execute(
            sa.text(
                "INSERT INTO alert_channels (owner_id, name, kind, recipients) "
                "VALUES (:o, 'mail', 'email', '{a@example.test}') RETURNING id"
            ),
            {"o": owner},
        ).scalar()
        conn.execute(
            sa.text(
                "INSERT INTO alert_rules (owner_id, name, on_kinds, channel_ids, mode) "
                "VALUES (:o, 'new', '{new}', ARRAY[CAST(:c AS bigint)], 'each')"
            ),
            {"o": owner, "c": channel},
        )
        # The messages' table is out of reach: writing them fails inside the analysis.
        conn.execute(sa.text("ALTER TABLE alert_deliveries RENAME TO alert_deliveries_away"))
    ip = "10.3.0.1"
    execution = pg_scans.scan(owner, [ip], [(ip, 80)])
    outcomes = pg_scans.settle()
    assert outcomes and {o.result for o in outcomes} == {"retrying"}
    assert changes_of(execution) == [] and _count("analysis_execution_summaries") == 0

    with transaction() as conn:
        conn.execute(sa.text("ALTER TABLE alert_deliveries_away RENAME TO alert_deliveries"))
    deadline = time.monotonic() + 30
    while not (outcomes := pg_scans.analyse()) and time.monotonic() < deadline:
        time.sleep(0.1)  # the retry's backoff
    assert [o.result for o in outcomes] == ["completed"]
    assert [c.kind for c in changes_of(execution)] == ["new"]
    assert _count("alert_deliveries") == 1
