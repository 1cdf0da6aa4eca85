"""Running Alembic from code: `netmap db upgrade`, `netmap up`, /readyz and the tests.

The Alembic scripts live next to the package (``alembic/``); this module finds
them, applies them and answers "is this database at head?". Answering that
question is on the start-up path of every database command (a cron job runs
``netmap traffic rollup`` every five minutes), so it does not import Alembic:
the heads are read from the scripts' ``revision`` / ``down_revision``
assignments and the current revisions from the ``alembic_version`` table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

import sqlalchemy as sa

from app.db import normalise_url

if TYPE_CHECKING:
    from alembic.config import Config

PROJECT_ROOT = Path(__file__).resolve().parent.parent
VERSIONS = PROJECT_ROOT / "alembic" / "versions"
_ASSIGNMENT = re.compile(r"^(revision|down_revision)\s*(?::[^=]*)?=\s*(.+?)\s*$", re.MULTILINE)


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(PROJECT_ROOT / "alembic"))
    if url:
        # ConfigParser interpolation treats % specially.
        config.set_main_option("sqlalchemy.url", normalise_url(url).replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(url), revision)


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
    if conn.execute(sa.text("SELECT to_regclass('alembic_version')")).scalar() is None:
        return set()
    return set(conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars())


def is_at_head(conn: sa.Connection) -> bool:
    return current_revisions(conn) == head_revisions()
