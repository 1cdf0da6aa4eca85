"""Running Alembic from code: `netmap db upgrade`, `netmap up`, /readyz and the tests.

The Alembic scripts live next to the package (``alembic/``); this module finds
them, applies them and answers "is this database at head?". Upgrades are safe to
start from several processes at once (a platform's release phase, two operators,
`netmap up` next to a deploy): ``alembic/env.py`` takes a session-level
PostgreSQL advisory lock first, so the second upgrade waits, then finds the
schema at head and does nothing. Each migration statement runs with a short
``lock_timeout`` (a migration that cannot get its table lock fails fast instead
of queueing every request behind it) and a ``statement_timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from alembic import command
from app.db import normalise_url

PROJECT_ROOT = Path(__file__).resolve().parent.parent

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
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    if url:
        # ConfigParser interpolation treats % specially.
        config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    config.attributes["netmap.migration_timeouts"] = timeouts or MigrationTimeouts()
    return config


def upgrade(url: str, revision: str = "head", timeouts: MigrationTimeouts | None = None) -> None:
    command.upgrade(alembic_config(url, timeouts), revision)


def downgrade(url: str, revision: str, timeouts: MigrationTimeouts | None = None) -> None:
    command.downgrade(alembic_config(url, timeouts), revision)


def head_revisions() -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config()).get_heads())


def current_revisions(conn: sa.Connection) -> set[str]:
    return set(MigrationContext.configure(conn).get_current_heads())


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
    engine = sa.create_engine(normalise_url(url), poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            current = current_revisions(conn)
    finally:
        engine.dispose()
    problem = schema_problem(current, head_revisions())
    if problem:
        raise SchemaNotCurrent(problem)
