"""``app.dbapi``: SQL written for ``sqlalchemy.text`` runs unchanged on a psycopg2 cursor."""

from __future__ import annotations

import subprocess
import sys

from app.dbapi import libpq_url, pyformat


def test_named_parameters_become_pyformat_and_the_rest_is_left_alone():
    sql = (
        "SELECT x::text, to_timestamp(:at), '%' || :name FROM t "
        "WHERE d = :domain AND b IN (CAST(:b AS bigint[])) AND s LIKE 'a%'"
    )
    assert pyformat(sql) == (
        "SELECT x::text, to_timestamp(%(at)s), '%%' || %(name)s FROM t "
        "WHERE d = %(domain)s AND b IN (CAST(%(b)s AS bigint[])) AND s LIKE 'a%%'"
    )
    assert pyformat("SELECT 1") == "SELECT 1"


def test_urls_in_sqlalchemy_spelling_are_given_to_libpq_in_its_own():
    assert libpq_url("postgresql+psycopg2://u:p@h:5/db") == "postgresql://u:p@h:5/db"
    assert libpq_url("postgres://u@h/db") == "postgresql://u@h/db"
    assert libpq_url("postgresql://u@h/db?sslmode=require") == "postgresql://u@h/db?sslmode=require"


_PROBE = "import sys, app.dbapi; print(sorted({'sqlalchemy', 'psycopg2'} & set(sys.modules)))"


def test_importing_the_module_loads_no_driver_wrapper():
    # The cron path imports this module; the driver and SQLAlchemy come only when used.
    done = subprocess.run(
        [sys.executable, "-c", _PROBE],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "[]"
