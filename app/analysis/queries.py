"""Reading change sets: a task's changes, counts per kind, one endpoint's history (ANA-5, ANA-6).

All reads come from the analysis's own compact tables (``analysis_changes``,
``analysis_execution_summaries``, ``analysis_assets``), never from raw facts.
Lists page by keyset on the change id (``app.cursors``), so a page costs the
same whatever its depth.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.analysis.changes import (
    ANALYSIS_FIELDS,
    CHANGE_KINDS,
    field_changed,
    field_changed_sql,
)
from app.cursors import cursor_int, cursor_str, decode_cursor, encode_cursor
from app.search.aggregates import hour_text

_VALUES = tuple(ANALYSIS_FIELDS)
_CHANGE_COLUMNS = (
    "c.id, c.execution_id, c.task_id, c.finished_at, c.kind, host(c.ip) AS ip, c.port, "
    "c.transport, " + ", ".join(f"c.old_{v}, c.new_{v}" for v in _VALUES)
)


_OLD = tuple((v, f"old_{v}") for v in _VALUES)
_NEW = tuple((v, f"new_{v}") for v in _VALUES)


# A ``changed`` change's differing values, named as documents and alert rules name them
# (the banner is compared by its hash): the same list alert payloads carry.
_FIELD_OF_VALUE = tuple((v, "banner" if v == "banner_hash" else v) for v in _VALUES)


def _values(row: Any, names: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {name: row[column] for name, column in names}


def _changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The fields a ``changed`` (or ``reappeared``) change differs in, from its old and new
    values."""
    return [
        field for value, field in _FIELD_OF_VALUE if field_changed(value, old[value], new[value])
    ]


def _change_item(row: Any, *, endpoint: bool) -> dict[str, Any]:
    """One change of a list. ``row`` is a row *mapping* (``.mappings()``): a key lookup
    costs about a sixth of a ``Row`` attribute, and a page reads 17 columns a row."""
    kind = row["kind"]
    item: dict[str, Any] = {
        "kind": kind,
        "execution_id": row["execution_id"],
        "task_id": row["task_id"],
        "at": row["finished_at"].isoformat(),
        "old": None if kind == "new" else _values(row, _OLD),
        "new": None if kind == "gone" else _values(row, _NEW),
    }
    if kind in ("changed", "reappeared"):  # reappeared: what differs from before it went
        item["changed_fields"] = _changed_fields(item["old"], item["new"])
    if endpoint:
        item.update(ip=row["ip"], port=row["port"], transport=row["transport"])
    return item


def task_changes(
    conn: Connection,
    task_id: int,
    *,
    kind: str | None,
    limit: int,
    cursor: str | None,
    execution_ids: list[int] | None = None,
) -> dict[str, Any]:
    """One keyset page of a task's changes (oldest first), optionally of one kind.

    ``execution_ids`` narrows them to one run's executions (the caller resolves the run).
    """
    position = decode_cursor("changes", cursor)
    params: dict[str, Any] = {"task_id": task_id, "limit": limit + 1, "after": 0}
    where = "c.task_id = :task_id AND c.id > :after"
    if position is not None:
        params["after"] = cursor_int(position, "id")
    if execution_ids is not None:
        where += " AND c.execution_id = ANY(:execution_ids)"
        params["execution_ids"] = execution_ids
    if kind is not None:
        where += " AND c.kind = :kind"
        params["kind"] = kind
    # The counts first: each statement reads the latest commits, and an analysis commits
    # an execution's changes with its summary, so changes counted as analysed are then
    # on the page. Read the other way round, an analysis committing between the two
    # statements gave an empty page that called the execution analysed.
    counts = task_change_counts(conn, task_id, execution_ids=execution_ids)
    page = _change_page(
        conn,
        f"SELECT {_CHANGE_COLUMNS} FROM analysis_changes c WHERE {where} "  # noqa: S608 - fragments are module constants; values are bound
        "ORDER BY c.id LIMIT :limit",
        params,
        limit=limit,
        cursor_kind="changes",
    )
    return {**page, "counts": counts}


def _change_page(
    conn: Connection, sql: str, params: dict[str, Any], *, limit: int, cursor_kind: str
) -> dict[str, Any]:
    """A keyset page of changes from ``sql`` (which reads ``limit + 1`` rows): the items
    and the cursor after the last one (None when no more follow)."""
    rows = conn.execute(sa.text(sql), params).mappings().all()
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(cursor_kind, {"id": rows[-1]["id"]})
    return {"items": [_change_item(r, endpoint=True) for r in rows], "next_cursor": next_cursor}


def owner_changes(
    conn: Connection, owner_id: int, *, kind: str | None, limit: int, cursor: str | None
) -> dict[str, Any]:
    """One keyset page of the owner's changes across all tasks, newest first, optionally
    of one kind. Each kind is one backward range of ``ix_analysis_changes_owner_kind``
    (at most a page from each), and all kinds are those ranges merged: one index, so
    the analysis's writes pay for one more entry a change, not two."""
    position = decode_cursor("change-feed", cursor)
    params: dict[str, Any] = {"owner_id": owner_id, "limit": limit + 1}
    before = ""
    if position is not None:
        before = " AND c.id < :before"
        params["before"] = cursor_int(position, "id")
    ranges = []
    for index, each in enumerate([kind] if kind is not None else CHANGE_KINDS):
        params[f"kind{index}"] = each
        ranges.append(
            f"(SELECT {_CHANGE_COLUMNS} FROM analysis_changes c "  # noqa: S608 - fragments are module constants; values are bound
            f"WHERE c.owner_id = :owner_id AND c.kind = :kind{index}{before} "
            "ORDER BY c.id DESC LIMIT :limit)"
        )
    return _change_page(
        conn,
        f"SELECT * FROM ({' UNION ALL '.join(ranges)}) c "  # noqa: S608 - fragments are module constants
        "ORDER BY c.id DESC LIMIT :limit",
        params,
        limit=limit,
        cursor_kind="change-feed",
    )


def task_change_counts(
    conn: Connection, task_id: int, *, execution_ids: list[int] | None = None
) -> dict[str, Any]:
    """Changes per kind over the task's analysed executions (or those of ``execution_ids``)."""
    row = conn.execute(
        sa.text(
            """
            SELECT coalesce(sum(new), 0) AS new, coalesce(sum(changed), 0) AS changed,
                   coalesce(sum(gone), 0) AS gone, coalesce(sum(reappeared), 0) AS reappeared,
                   count(*) AS analysed_executions
              FROM analysis_execution_summaries
             WHERE task_id = :task_id
               AND (CAST(:ids AS bigint[]) IS NULL OR execution_id = ANY(CAST(:ids AS bigint[])))
            """
        ),
        {"task_id": task_id, "ids": execution_ids},
    ).one()
    return {
        **{k: int(getattr(row, k)) for k in CHANGE_KINDS},
        "analysed_executions": int(row.analysed_executions),
    }


def new_endpoints_by_hour(
    conn: Connection, execution_ids: list[int]
) -> dict[int, list[dict[str, Any]]]:
    """Per execution (analysed ones: ``execution_change_counts`` tells them): the
    endpoints it found that were new to their owner, counted by the UTC hour it found
    them in (when it finished); what a task's report calls new. An endpoint a rescan
    sees again is no new one (the execution's own first_seen is the scan's time)."""
    found: dict[int, list[dict[str, Any]]] = {i: [] for i in execution_ids}
    if not execution_ids:
        return found
    rows = conn.execute(
        sa.text(
            """
            SELECT execution_id, date_trunc('hour', finished_at, 'UTC') AS hour, count(*) AS n
              FROM analysis_changes
             WHERE execution_id = ANY(CAST(:ids AS bigint[])) AND kind = 'new'
             GROUP BY 1, 2 ORDER BY 1, 2
            """
        ),
        {"ids": execution_ids},
    )
    for row in rows:
        found[row.execution_id].append({"hour": hour_text(row.hour), "count": row.n})
    return found


def execution_change_counts(
    conn: Connection, execution_ids: Iterable[int]
) -> dict[int, dict[str, Any] | None]:
    """Per execution: changes per kind, or ``None`` while it is not analysed yet."""
    ids = list(execution_ids)
    found: dict[int, dict[str, Any] | None] = {i: None for i in ids}
    if not ids:
        return found
    rows = conn.execute(
        sa.text(
            """
            SELECT execution_id, new, changed, gone, reappeared, absence_checked, superseded
              FROM analysis_execution_summaries WHERE execution_id = ANY(:ids)
            """
        ),
        {"ids": ids},
    ).all()
    for r in rows:
        found[r.execution_id] = {
            **{k: int(getattr(r, k)) for k in CHANGE_KINDS},
            "absence_checked": r.absence_checked,
            "superseded": r.superseded,
        }
    return found


def endpoint_history(
    conn: Connection,
    *,
    owner_id: int,
    ip: str,
    port: int,
    transport: str,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """One endpoint's current verdict and its events, oldest first (status None: never seen)."""
    key = {"owner_id": owner_id, "ip": ip, "port": port, "transport": transport}
    state = conn.execute(
        sa.text(
            f"""
            SELECT status, gone_since, gone_execution_id, first_execution_id,
                   {", ".join(_VALUES)}
              FROM analysis_assets
             WHERE owner_id = :owner_id AND ip = CAST(:ip AS inet) AND port = :port
               AND transport = :transport
            """  # noqa: S608 - fragments are module constants; values are bound
        ),
        key,
    ).one_or_none()
    position = decode_cursor("history", cursor)
    after = cursor_int(position, "id") if position is not None else 0
    rows = (
        conn.execute(
            sa.text(
                f"""
            SELECT {_CHANGE_COLUMNS} FROM analysis_changes c
             WHERE c.owner_id = :owner_id AND c.ip = CAST(:ip AS inet) AND c.port = :port
               AND c.transport = :transport AND c.id > :after
             ORDER BY c.id LIMIT :limit
            """  # noqa: S608 - fragments are module constants; values are bound
            ),
            {**key, "after": after, "limit": limit + 1},
        )
        .mappings()
        .all()
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor("history", {"id": rows[-1]["id"]})
    return {
        "ip": ip,
        "port": port,
        "transport": transport,
        "status": state.status if state else None,
        "gone_since": state.gone_since.isoformat() if state and state.gone_since else None,
        "gone_execution_id": state.gone_execution_id if state else None,
        "first_execution_id": state.first_execution_id if state else None,
        "current": {v: getattr(state, v) for v in _VALUES} if state else None,
        "events": [_change_item(r, endpoint=False) for r in rows],
        "next_cursor": next_cursor,
    }


def recent_change_counts(
    conn: Connection, owner_id: int, *, days: int, execution_cap: int
) -> dict[str, Any]:
    """New and gone endpoints of an owner's executions finished in the last ``days`` days.

    Sums the per-execution summaries (one row per analysed execution, never the
    change rows themselves) over at most ``execution_cap`` executions, so the
    cost stays bounded however many changes there are; ``more`` says the cap was hit.
    """
    row = conn.execute(
        sa.text(
            """
            SELECT coalesce(sum(new), 0) AS new, coalesce(sum(gone), 0) AS gone,
                   count(*) AS executions
              FROM (SELECT new, gone FROM analysis_execution_summaries
                     WHERE owner_id = :owner_id
                       AND finished_at >= now() - make_interval(days => :days)
                     LIMIT :cap) AS recent
            """
        ),
        {"owner_id": owner_id, "days": days, "cap": execution_cap + 1},
    ).one()
    return {
        "new": int(row.new),
        "gone": int(row.gone),
        "more": int(row.executions) > execution_cap,
    }


_FIRST_OLD = ", ".join(f"f.old_{v}" for v in _VALUES)
_LAST_NEW = ", ".join(f"l.new_{v}" for v in _VALUES)
_DIFFERS = " OR ".join(field_changed_sql(v, f"f.old_{v}", f"l.new_{v}") for v in _VALUES)

# The net effect of a run range's change events per endpoint: the first event says what
# the endpoint was before the range (absent if it was ``new`` or ``reappeared``), the
# last one what it was after (absent if ``gone``).
_COMPARE_SQL = f"""
    WITH ev AS (
        SELECT * FROM analysis_changes
         WHERE task_id = :task_id AND execution_id = ANY(:execution_ids)
    ),
    f AS (SELECT DISTINCT ON (ip, port, transport) * FROM ev ORDER BY ip, port, transport, id),
    l AS (
        SELECT DISTINCT ON (ip, port, transport) * FROM ev ORDER BY ip, port, transport, id DESC
    ),
    net AS (
        SELECT f.ip, f.port, f.transport,
               f.kind IN ('changed', 'gone') AS before, l.kind <> 'gone' AS after,
               ({_DIFFERS}) AS differs, {_FIRST_OLD}, {_LAST_NEW}
          FROM f JOIN l USING (ip, port, transport)
    )
    SELECT * FROM (
        SELECT host(ip) AS ip, ip AS ip_key, port, transport,
               CASE WHEN before AND NOT after THEN 'gone'
                    WHEN after AND NOT before THEN 'new'
                    ELSE 'changed' END AS kind,
               {", ".join(f"old_{v}" for v in _VALUES)},
               {", ".join(f"new_{v}" for v in _VALUES)}
          FROM net
         WHERE (before <> after OR (before AND differs))
           AND (ip, port, transport) > (CAST(:after_ip AS inet), :after_port, :after_transport)
    ) d
     WHERE CAST(:kind AS text) IS NULL OR d.kind = :kind
     ORDER BY d.ip_key, d.port, d.transport
     LIMIT :limit
"""  # noqa: S608 - fragments are module constants; values are bound

_SWAPPED = {"new": "gone", "gone": "new", "changed": "changed"}


def compare_runs(
    conn: Connection,
    task_id: int,
    *,
    execution_ids: list[int],
    reverse: bool,
    kind: str | None = None,
    limit: int,
    cursor: str | None,
) -> dict[str, Any]:
    """What differs between two runs of a task, endpoint by endpoint.

    ``execution_ids`` are the executions of the runs after the earlier run up to and
    including the later one; their change sets are composed into one net change per
    endpoint (``new``, ``gone`` or ``changed``: values observed both times that differ).
    ``reverse`` reads the comparison from the later run to the earlier one.
    """
    position = decode_cursor("run_compare", cursor)
    # Before the first page: below every address (inet sorts IPv4 before IPv6).
    after: tuple[str, int, str] = ("0.0.0.0/0", -1, "")
    if position is not None:
        after = (
            cursor_str(position, "ip"),
            cursor_int(position, "port"),
            cursor_str(position, "transport"),
        )
    rows = (
        conn.execute(
            sa.text(_COMPARE_SQL),
            {
                "task_id": task_id,
                "execution_ids": execution_ids,
                "after_ip": after[0],
                "after_port": after[1],
                "after_transport": after[2],
                "kind": (_SWAPPED.get(kind, kind) if reverse else kind),
                "limit": limit + 1,
            },
        )
        .mappings()
        .all()
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        last = rows[-1]
        next_cursor = encode_cursor(
            "run_compare",
            {"ip": str(last["ip_key"]), "port": last["port"], "transport": last["transport"]},
        )
    items = []
    for r in rows:
        old, new = _values(r, _OLD), _values(r, _NEW)
        kind = r["kind"]
        if reverse:
            kind, old, new = _SWAPPED[kind], new, old
        item = {
            "kind": kind,
            "ip": r["ip"],
            "port": r["port"],
            "transport": r["transport"],
            "old": None if kind == "new" else old,
            "new": None if kind == "gone" else new,
        }
        if kind == "changed":
            # As every other change list names them (the console showed "open → open").
            item["changed_fields"] = _changed_fields(old, new)
        items.append(item)
    return {"items": items, "next_cursor": next_cursor}


_HOST_CHANGES = sa.text(
    f"""
    SELECT {_CHANGE_COLUMNS}
      FROM analysis_changes c
     WHERE c.owner_id = :owner_id AND c.ip = CAST(:ip AS inet)
     ORDER BY c.id DESC
     LIMIT :limit
    """  # noqa: S608 - fragments are module constants; values are bound
)


def host_changes(conn: Connection, *, owner_id: int, ip: str, limit: int) -> list[dict[str, Any]]:
    """The newest changes of one address among an owner's executions (the host view), as
    every change list shows them: all values and a ``changed`` one's ``changed_fields``
    (the host view showed service, product and certificate only, so a new version read
    as a change of nothing)."""
    rows = conn.execute(_HOST_CHANGES, {"owner_id": owner_id, "ip": ip, "limit": limit})
    return [_change_item(row, endpoint=True) for row in rows.mappings()]
