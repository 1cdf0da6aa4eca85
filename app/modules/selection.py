"""Which renderer release should run: the ``report_renderer`` runtime configuration (MOD-3).

``runtime_configuration`` holds the current document and revision of each
namespace; ``runtime_configuration_revisions`` keeps every revision with who
changed it and why, written in the same transaction. The revision only grows:
rollback is a new revision that selects an older release. Readers accept only
``schema_version = 1`` and positive revisions, so a document written by a
newer server is never misread as the current format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import Conflict

NAMESPACE = "report_renderer"
SCHEMA_VERSION = 1
DEFAULT_DOCUMENT = {"release_id": "builtin"}


class SelectionInvalid(Exception):
    """The stored selection cannot be interpreted by this server."""


@dataclass(frozen=True)
class Selection:
    release_id: str
    revision: int
    schema_version: int = SCHEMA_VERSION


def ensure_default_selection(conn: Connection) -> bool:
    """Insert ``{"release_id": "builtin"}`` at revision 1 unless a selection exists."""
    inserted = conn.execute(
        sa.text(
            """
            INSERT INTO runtime_configuration (namespace, schema_version, revision, document,
                                               change_reason)
            VALUES (:ns, :sv, 1, CAST(:doc AS jsonb), 'default selection')
            ON CONFLICT (namespace) DO NOTHING
            RETURNING revision
            """
        ),
        {"ns": NAMESPACE, "sv": SCHEMA_VERSION, "doc": json.dumps(DEFAULT_DOCUMENT)},
    ).scalar()
    if inserted is None:
        return False
    conn.execute(
        sa.text(
            """
            INSERT INTO runtime_configuration_revisions
                (namespace, revision, schema_version, document, change_reason)
            VALUES (:ns, 1, :sv, CAST(:doc AS jsonb), 'default selection')
            ON CONFLICT DO NOTHING
            """
        ),
        {"ns": NAMESPACE, "sv": SCHEMA_VERSION, "doc": json.dumps(DEFAULT_DOCUMENT)},
    )
    return True


def _interpret(row: Any) -> Selection:
    if row.schema_version != SCHEMA_VERSION:
        raise SelectionInvalid(
            f"selection schema_version {row.schema_version} is not supported "
            f"(only {SCHEMA_VERSION})"
        )
    if not isinstance(row.revision, int) or row.revision <= 0:
        raise SelectionInvalid(f"selection revision {row.revision!r} is not a positive integer")
    document = row.document
    release_id = document.get("release_id") if isinstance(document, dict) else None
    if not isinstance(release_id, str) or not release_id:
        raise SelectionInvalid("selection document has no release_id")
    return Selection(
        release_id=release_id, revision=row.revision, schema_version=row.schema_version
    )


def read_selection(conn: Connection) -> Selection:
    row = conn.execute(
        sa.text(
            "SELECT schema_version, revision, document FROM runtime_configuration "
            "WHERE namespace = :ns"
        ),
        {"ns": NAMESPACE},
    ).one_or_none()
    if row is None:
        raise SelectionInvalid("no report_renderer selection is stored")
    return _interpret(row)


def publish_selection(
    conn: Connection,
    *,
    expected_revision: int,
    release_id: str,
    change_reason: str,
    actor_user_id: int | None,
) -> int:
    """Optimistic publish: the new revision, or ``Conflict`` if someone published first."""
    row = conn.execute(
        sa.text(
            """
            UPDATE runtime_configuration
               SET document = CAST(:doc AS jsonb), schema_version = :sv,
                   revision = revision + 1, updated_by = :actor, change_reason = :reason,
                   updated_at = now()
             WHERE namespace = :ns AND revision = :expected
            RETURNING revision
            """
        ),
        {
            "ns": NAMESPACE,
            "sv": SCHEMA_VERSION,
            "doc": json.dumps({"release_id": release_id}),
            "actor": actor_user_id,
            "reason": change_reason,
            "expected": expected_revision,
        },
    ).scalar()
    if row is None:
        current = conn.execute(
            sa.text("SELECT revision FROM runtime_configuration WHERE namespace = :ns"),
            {"ns": NAMESPACE},
        ).scalar()
        raise Conflict(
            f"expectedRevision {expected_revision} is not the current revision",
            code="revision_conflict",
            details={"expectedRevision": expected_revision, "currentRevision": current},
        )
    conn.execute(
        sa.text(
            """
            INSERT INTO runtime_configuration_revisions
                (namespace, revision, schema_version, document, changed_by, change_reason)
            VALUES (:ns, :rev, :sv, CAST(:doc AS jsonb), :actor, :reason)
            """
        ),
        {
            "ns": NAMESPACE,
            "rev": row,
            "sv": SCHEMA_VERSION,
            "doc": json.dumps({"release_id": release_id}),
            "actor": actor_user_id,
            "reason": change_reason,
        },
    )
    return int(row)


def recent_revisions(conn: Connection, *, limit: int = 10) -> list[dict[str, Any]]:
    """The newest published revisions (for the console's rollback choices), newest first."""
    rows = conn.execute(
        sa.text(
            """
            SELECT revision, document ->> 'release_id' AS release_id, change_reason, created_at
              FROM runtime_configuration_revisions
             WHERE namespace = :ns
             ORDER BY revision DESC LIMIT :limit
            """
        ),
        {"ns": NAMESPACE, "limit": limit},
    ).all()
    return [
        {
            "revision": r.revision,
            "release_id": r.release_id,
            "change_reason": r.change_reason,
            "created_at": r.created_at,
        }
        for r in rows
    ]


# An admin's explicit close of stuck draining generations (MOD-2), read by every
# process's refresh loop: draining generations are per process, revisions are global.
CLOSE_NAMESPACE = "report_renderer_close"


def request_close(conn: Connection, *, through_revision: int, actor_user_id: int | None) -> int:
    """Store "close the stuck generations up to ``through_revision``"; its revision."""
    document = json.dumps({"through_revision": through_revision})
    revision = conn.execute(
        sa.text(
            """
            INSERT INTO runtime_configuration (namespace, schema_version, revision, document,
                                               updated_by, change_reason)
            VALUES (:ns, :sv, 1, CAST(:doc AS jsonb), :by, 'close stuck generations')
            ON CONFLICT (namespace) DO UPDATE
               SET revision = runtime_configuration.revision + 1, document = EXCLUDED.document,
                   updated_by = EXCLUDED.updated_by, updated_at = now()
            RETURNING revision
            """
        ),
        {"ns": CLOSE_NAMESPACE, "sv": SCHEMA_VERSION, "doc": document, "by": actor_user_id},
    ).scalar_one()
    conn.execute(
        sa.text(
            """
            INSERT INTO runtime_configuration_revisions
                (namespace, revision, schema_version, document, changed_by, change_reason)
            VALUES (:ns, :rev, :sv, CAST(:doc AS jsonb), :by, 'close stuck generations')
            """
        ),
        {
            "ns": CLOSE_NAMESPACE,
            "rev": revision,
            "sv": SCHEMA_VERSION,
            "doc": document,
            "by": actor_user_id,
        },
    )
    return revision


def read_close_request(conn: Connection) -> tuple[int, int | None] | None:
    """(through_revision, requested_by) of the last close request, or None."""
    row = conn.execute(
        sa.text("SELECT document, updated_by FROM runtime_configuration WHERE namespace = :ns"),
        {"ns": CLOSE_NAMESPACE},
    ).one_or_none()
    if row is None or not isinstance(row.document, dict):
        return None
    through = row.document.get("through_revision")
    if not isinstance(through, int) or isinstance(through, bool):
        return None
    return through, row.updated_by
