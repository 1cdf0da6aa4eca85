"""Running Alembic from code: `netmap db upgrade`, `netmap up`, /readyz and the tests.

The Alembic scripts live next to the package (``alembic/``); this module finds
them, applies them and answers "is this database at head?".
"""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from alembic import command
from app.db import normalise_url

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def alembic_config(url: str | None = None) -> Config:
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    if url:
        # ConfigParser interpolation treats % specially.
        config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def head_revisions() -> set[str]:
    return set(ScriptDirectory.from_config(alembic_config()).get_heads())


def current_revisions(conn: sa.Connection) -> set[str]:
    return set(MigrationContext.configure(conn).get_current_heads())


def is_at_head(conn: sa.Connection) -> bool:
    return current_revisions(conn) == head_revisions()
