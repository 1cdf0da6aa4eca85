"""The scanner fleet: each scanner's status, what its agent reported, what it is doing.

The scanners and what their agents report belong to ``app.identity.scanners``; which
execution a scanner holds and how fast its last one went are this package's
``scan_executions``. The status of a scanner (docs/scanner-protocol.md, "Scanner status"):

* ``never_seen``: no claim, renewal or upload yet;
* ``busy``: it holds a live execution lease (status ``running``, lease not expired);
* ``offline``: its last sign of life is older than ``[scan] scanner_offline_seconds``;
* ``online``: otherwise.

A revoked scanner is listed with ``disabled: true`` and the status its last sign of life
gives. Admins see every scanner; other users see the scanners they created (only admins
can create scanners today, so that list is empty for them).
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.db import transaction
from app.identity.scanners import ScannerState, any_scanner_online, scanner_states
from app.identity.users import User

STATUSES = ("never_seen", "online", "busy", "offline")
MAX_SCANNERS = 1000


# An execution ``e`` held under a live lease: its scanner is ``busy``.
_LIVE_LEASE = "e.status = 'running' AND e.lease_expires_at > now()"


def _activity(conn: Connection, scanner_ids: list[int]) -> dict[int, Any]:
    """Per scanner: the execution it holds under a live lease, and its last finished one's
    observations and seconds (one indexed probe each)."""
    if not scanner_ids:
        return {}
    rows = conn.execute(
        sa.text(
            f"""
            SELECT s.id,
                   (SELECT e.id FROM scan_executions e
                     WHERE e.scanner_id = s.id AND {_LIVE_LEASE}
                     ORDER BY e.id LIMIT 1) AS current_execution_id,
                   last.id AS last_execution_id,
                   last.observation_count AS last_observations,
                   extract(epoch FROM last.finished_at - last.started_at) AS last_seconds
              FROM unnest(CAST(:ids AS bigint[])) AS s(id)
              LEFT JOIN LATERAL (
                  SELECT e.id, e.observation_count, e.started_at, e.finished_at
                    FROM scan_executions e
                   WHERE e.scanner_id = s.id AND e.status = 'succeeded'
                   ORDER BY e.finished_at DESC
                   LIMIT 1
              ) AS last ON true
            """  # noqa: S608 - a module constant
        ),
        {"ids": scanner_ids},
    ).all()
    return {r.id: r for r in rows}


def holds_live_lease_sql(scanner_id: str) -> str:
    """SQL: the scanner ``scanner_id`` (an expression) holds an execution under a live
    lease (``busy``). Its agent renews the lease a third of the lease into it, so a long
    scan is silent for longer than ``scanner_offline_seconds`` may be, and is no outage."""
    where = f"e.scanner_id = {scanner_id} AND {_LIVE_LEASE}"
    return f"EXISTS (SELECT 1 FROM scan_executions e WHERE {where})"  # noqa: S608 - constants


def status_of(state: ScannerState, current_execution_id: int | None) -> str:
    if current_execution_id is not None:
        return "busy"
    if state.last_seen_at is None:
        return "never_seen"
    return "offline" if state.offline else "online"


def _item(state: ScannerState, activity: Any) -> dict[str, Any]:
    current = activity.current_execution_id if activity is not None else None
    rate = None
    if activity is not None and activity.last_execution_id is not None:
        seconds = float(activity.last_seconds or 0)
        # A run shorter than the clock's resolution has no meaningful rate.
        rate = round(activity.last_observations / seconds, 3) if seconds > 0 else None
    return {
        "id": state.id,
        "name": state.name,
        "status": status_of(state, current),
        "disabled": state.disabled,
        "last_seen_at": state.last_seen_at.isoformat() if state.last_seen_at else None,
        "version": state.version,
        "hostname": state.hostname,
        "engines": state.engines,
        "current_execution_id": current,
        "last_execution_id": activity.last_execution_id if activity is not None else None,
        "observations_per_second": rate,
        "created_at": state.created_at.isoformat(),
    }


def list_fleet(
    user: User, *, offline_seconds: int, limit: int = MAX_SCANNERS, after_id: int = 0
) -> list[dict[str, Any]]:
    """The scanners the user may see (admins: all; others: those they created), by id
    (keyset on id: ``after_id``)."""
    with transaction() as conn:
        states = scanner_states(
            conn,
            offline_seconds=offline_seconds,
            created_by=None if user.is_admin else user.id,
            limit=limit,
            after_id=after_id,
        )
        activity = _activity(conn, [s.id for s in states])
    return [_item(s, activity.get(s.id)) for s in states]


def fleet_online(*, offline_seconds: int) -> bool:
    """Whether any enabled scanner is online (the dashboard's "no scanner" notice)."""
    with transaction() as conn:
        return any_scanner_online(conn, offline_seconds=offline_seconds)
