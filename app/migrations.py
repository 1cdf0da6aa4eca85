"""Running Alembic from code: `netmap db upgrade`, `netmap up`, /readyz and the tests.

The Alembic scripts live next to the package (``alembic/``); this module finds
them, applies them and answers "is this database at head?". Upgrades are safe to
start from several processes at once (a platform's release phase, two operators,
`netmap up` next to a deploy): ``alembic/env.py`` takes a session-level
PostgreSQL advisory lock first, so the second upgrade waits, then finds the
schema at head and does nothing. Each migration statement runs with a short
``lock_timeout`` (a migration that cannot get its table lock fails fast instead
of queueing every request behind it) and a ``statement_timeout``.

"Is this database at head?" is on the start-up path of every database command (a cron job runs
``netmap traffic rollup`` every five minutes), so it does not import Alembic:
the heads are read from the scripts' ``revision`` / ``down_revision``
assignments and the current revisions from the ``alembic_version`` table.
"""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlalchemy as sa
    from alembic.config import Config

# SQLAlchemy (and app.db, which needs it) is imported inside the functions that use it:
# a command on psycopg2 alone checks its schema with ``current_revisions_on_cursor``.

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _scripts_home() -> Path:
    """Where ``alembic.ini`` and ``alembic/`` are: beside ``app/`` in a checkout (and its
    editable install), or ``<prefix>/share/netmap`` where a built package installs them
    (setup.cfg's data files; a top-level ``alembic`` package would shadow the library)."""
    if (PROJECT_ROOT / "alembic" / "env.py").is_file():
        return PROJECT_ROOT
    for prefix in (sys.prefix, sys.base_prefix):
        installed = Path(prefix) / "share" / "netmap"
        if (installed / "alembic" / "env.py").is_file():
            return installed
    return PROJECT_ROOT  # nothing found: errors name the checkout's path


SCRIPTS_HOME = _scripts_home()
VERSIONS = SCRIPTS_HOME / "alembic" / "versions"
_ASSIGNMENT = re.compile(r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)

# The key of the session advisory lock every upgrade and downgrade holds. A fixed 64-bit
# number ("netmap-m" in ASCII) so it cannot collide with the lock keys the domains derive.
MIGRATION_LOCK_KEY = 0x6E65746D61702D6D

UPGRADE_COMMAND = "netmap db upgrade"


@dataclass(frozen=True)
class MigrationTimeouts:
    """Server-side limits for migration statements (0 disables one)."""

    lock_timeout_ms: int = 5000
    statement_timeout_ms: int = 600_000


class SchemaNotCurrent(RuntimeError):
    """The database is not at the schema this code needs; the message names the command."""


def alembic_config(url: str | None = None, timeouts: MigrationTimeouts | None = None) -> Config:
    from alembic.config import Config

    config = Config(str(SCRIPTS_HOME / "alembic.ini"))
    config.set_main_option("script_location", str(SCRIPTS_HOME / "alembic"))
    if url:
        # ConfigParser interpolation treats % specially.
        from app.db import normalise_url

        config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    config.attributes["netmap.migration_timeouts"] = timeouts or MigrationTimeouts()
    return config


def upgrade(url: str, revision: str = "head", timeouts: MigrationTimeouts | None = None) -> None:
    from alembic import command

    command.upgrade(alembic_config(url, timeouts), revision)


def downgrade(url: str, revision: str, timeouts: MigrationTimeouts | None = None) -> None:
    from alembic import command

    command.downgrade(alembic_config(url, timeouts), revision)


def head_revisions() -> set[str]:
    """Revisions no other script names as its ``down_revision``."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for script in VERSIONS.glob("*.py"):
        values = dict(_ASSIGNMENT.findall(script.read_text(encoding="utf-8")))
        if "revision" not in values:
            continue
        revisions.add(ast.literal_eval(values["revision"]))
        down = ast.literal_eval(values.get("down_revision", "None"))
        if isinstance(down, str):
            parents.add(down)
        elif down:
            parents.update(down)
    return revisions - parents


def current_revisions(conn: sa.Connection) -> set[str]:
    import sqlalchemy as sa

    if conn.execute(sa.text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return set()
    return set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


def database_revisions() -> set[str]:
    """``current_revisions`` in a short transaction of its own (the readiness probe)."""
    from app.db import transaction

    with transaction() as conn:
        return current_revisions(conn)


def current_revisions_on_cursor(cursor: Any) -> set[str]:
    """``current_revisions`` through a plain DB-API (psycopg2) cursor."""
    cursor.execute("SELECT to_regclass('alembic_version')")
    if cursor.fetchone()[0] is None:
        return set()
    cursor.execute("SELECT version_num FROM alembic_version")
    return {row[0] for row in cursor.fetchall()}


def is_at_head(conn: sa.Connection) -> bool:
    return current_revisions(conn) == head_revisions()


def schema_problem(current: set[str], heads: set[str]) -> str | None:
    """None when ``current`` is the head; otherwise a sentence naming the command to run."""
    if current == heads:
        return None
    if not current:
        return f"the database has no netmap schema yet: run `{UPGRADE_COMMAND}` first"
    return (
        f"the database schema is at revision {', '.join(sorted(current))} but this release "
        f"needs {', '.join(sorted(heads))}: run `{UPGRADE_COMMAND}` first "
        "(the Procfile's release phase does this on deploy)"
    )


def require_schema_at_head(url: str) -> None:
    """Raise ``SchemaNotCurrent`` unless the database at ``url`` is migrated to head.

    The runner and the web process call this before they start, so a deploy that skipped
    the release phase fails with a sentence naming the command instead of SQL errors later.
    """
    import sqlalchemy as sa

    from app.db import normalise_url

    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            current = current_revisions(conn)
    finally:
        engine.dispose()
    problem = schema_problem(current, head_revisions())
    if problem:
        raise SchemaNotCurrent(problem)
