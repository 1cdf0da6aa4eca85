"""A store timeout is a 503 and an error event naming the statement and the request (issue 21).

A soak found a results call that hit the statement timeout and came back as 503
``store_unavailable`` with nothing logged. Every timeout of the PostgreSQL store is
now logged as ``SearchStoreTimeout`` (level ERROR) with the statement's name and the
span's request id, before it is answered like any outage.
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

from app.observability import span
from app.search.port import StoreUnavailable


def _sleep_past_the_timeout(conn):
    conn.execute(sa.text("SET LOCAL statement_timeout = '20ms'"))
    conn.execute(sa.text("SELECT pg_sleep(2)"))


def _timeouts(caplog):
    return [
        (r.levelno, r.netmap_fields)
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "SearchStoreTimeout"
    ]


def test_a_statement_timeout_is_logged_with_statement_and_request_id(postgres_store, caplog):
    caplog.set_level(logging.INFO)
    with span("Request", request_id="req-timeout-1"), pytest.raises(StoreUnavailable):
        postgres_store._run(_sleep_past_the_timeout, statement="execution_results_page")
    [(level, fields)] = _timeouts(caplog)
    assert level == logging.ERROR
    assert fields["statement"] == "execution_results_page"
    assert fields["request_id"] == "req-timeout-1"
    assert fields["sqlstate"] == "57014"


def test_the_statement_name_defaults_to_the_calling_method(postgres_store, caplog):
    caplog.set_level(logging.INFO)
    with pytest.raises(StoreUnavailable):
        postgres_store._run(_sleep_past_the_timeout)
    [(_level, fields)] = _timeouts(caplog)
    assert fields["statement"] == "test_the_statement_name_defaults_to_the_calling_method"


def test_a_statement_in_time_logs_no_timeout(postgres_store, caplog):
    caplog.set_level(logging.INFO)
    assert postgres_store._run(lambda conn: conn.execute(sa.text("SELECT 1")).scalar()) == 1
    assert _timeouts(caplog) == []
