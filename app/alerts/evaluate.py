"""Rule evaluation: a committed change set becomes alert messages in one statement.

``enqueue_alerts`` runs inside the change analysis's transaction (``app.analysis.changes
.analyse``), so the change set and its messages commit together or not at all. The
evaluation is set-based: the change set (``CHANGE_SET_SQL``) is joined with the owner's
enabled rules (and global ones) and their channels, filtered in SQL, numbered per rule
and channel, and inserted as ``alert_deliveries`` rows; no change passes through Python.

Messages per change set (a run's change set: docs/alerts.md), rule and channel:

* ``each``: one message per change, the first ``[alerts] max_messages_per_run`` of them;
  the rest are folded into one digest message;
* ``digest``: one message with the counts by kind, the first ``[alerts] digest_changes``
  changes and a link to the change set.

Every message gets its id here (``msg_`` and 32 hex digits): the id every delivery
attempt sends, so receivers can drop duplicates.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.analysis.changes import ANALYSIS_FIELDS, CHANGE_KINDS, CHANGE_SET_SQL
from app.config import AlertSettings
from app.observability import emit

# A rule's ``fields`` speak of documents' fields; the change set keeps the banner's hash.
_COLUMN_OF_FIELD = {("banner" if c == "banner_hash" else c): c for c in ANALYSIS_FIELDS}


def _values(side: str) -> str:
    pairs = ", ".join(f"'{c}', x.{side}_{c}" for c in ANALYSIS_FIELDS)
    return f"jsonb_build_object({pairs})"


def _changed_fields() -> str:
    items = ", ".join(
        f"CASE WHEN x.old_{c} IS DISTINCT FROM x.new_{c} THEN '{f}' END"
        for f, c in _COLUMN_OF_FIELD.items()
    )
    return f"array_remove(ARRAY[{items}]::text[], NULL)"


def _fields_test() -> str:
    return " OR ".join(
        f"('{f}' = ANY(r.fields) AND x.old_{c} IS DISTINCT FROM x.new_{c})"
        for f, c in _COLUMN_OF_FIELD.items()
    )


def enqueue_sql() -> str:
    counts = ", ".join(f"'{k}', count(*) FILTER (WHERE kind = '{k}')" for k in CHANGE_KINDS)
    return f"""
    WITH x AS MATERIALIZED ({CHANGE_SET_SQL}),
    targets AS MATERIALIZED (
        SELECT r.id AS rule_id, r.owner_id AS rule_owner, r.name AS rule_name, r.mode,
               r.on_kinds, r.fields, r.cidrs, r.ports, r.services, r.products, r.task_ids,
               c.id AS channel_id
          FROM alert_rules r
          JOIN alert_channels c ON c.id = ANY(r.channel_ids) AND c.owner_id = r.owner_id
         WHERE r.enabled AND (r.owner_id = :owner_id OR r.is_global)
    ),
    matched AS MATERIALIZED (
        SELECT r.rule_id, r.rule_owner, r.rule_name, r.mode, r.channel_id, x.id AS change_id,
               x.kind,
               row_number() OVER (PARTITION BY r.rule_id, r.channel_id ORDER BY x.id) AS n,
               jsonb_build_object(
                   'change_id', x.id, 'kind', x.kind, 'ip', host(x.ip), 'port', x.port,
                   'transport', x.transport, 'task_id', x.task_id,
                   'execution_id', x.execution_id, 'finished_at', x.finished_at,
                   'old', CASE WHEN x.kind = 'new' THEN NULL ELSE {_values("old")} END,
                   'new', CASE WHEN x.kind = 'gone' THEN NULL ELSE {_values("new")} END,
                   'changed_fields', CASE WHEN x.kind = 'changed'
                                          THEN to_jsonb({_changed_fields()}) END
               ) AS change
          FROM targets r
          JOIN x ON x.kind = ANY(r.on_kinds)
         WHERE (cardinality(r.cidrs) = 0 OR x.ip <<= ANY(r.cidrs))
           AND (cardinality(r.ports) = 0 OR x.port = ANY(r.ports))
           AND (cardinality(r.services) = 0
                OR coalesce(x.new_service, x.old_service) = ANY(r.services))
           AND (cardinality(r.products) = 0
                OR coalesce(x.new_product, x.old_product) = ANY(r.products))
           AND (cardinality(r.task_ids) = 0 OR x.task_id = ANY(r.task_ids))
           AND (x.kind <> 'changed' OR cardinality(r.fields) = 0 OR {_fields_test()})
    ),
    digested AS (
        -- A digest rule's changes, and an ``each`` rule's beyond the cap.
        SELECT m.*, CASE WHEN m.mode = 'each' THEN m.n - :cap ELSE m.n END AS position
          FROM matched m
         WHERE m.mode = 'digest' OR m.n > :cap
    ),
    digests AS (
        SELECT rule_id, rule_owner, min(rule_name) AS rule_name, channel_id,
               bool_or(mode = 'each') AS folded, count(*) AS total,
               jsonb_build_object({counts}) AS counts,
               coalesce(jsonb_agg(change ORDER BY change_id)
                        FILTER (WHERE position <= :digest_changes), '[]') AS changes
          FROM digested
         GROUP BY rule_id, rule_owner, channel_id
    ),
    messages AS (
        SELECT rule_id, rule_owner, channel_id, 'each' AS message_kind,
               'netmap.change.' || kind AS event_type,
               jsonb_build_object('rule', jsonb_build_object('id', rule_id, 'name', rule_name),
                                  'change', change, 'link', :link) AS payload
          FROM matched WHERE mode = 'each' AND n <= :cap
        UNION ALL
        SELECT rule_id, rule_owner, channel_id, 'digest', 'netmap.digest',
               jsonb_build_object('rule', jsonb_build_object('id', rule_id, 'name', rule_name),
                                  'execution_id', CAST(:execution_id AS bigint),
                                  'task_id', CAST(:task_id AS bigint),
                                  'folded', folded, 'total', total, 'counts', counts,
                                  'changes', changes,
                                  'more', total - jsonb_array_length(changes), 'link', :link)
          FROM digests
    ),
    inserted AS (
        INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, execution_id, task_id,
                                      message_kind, event_type, payload)
        SELECT 'msg_' || replace(CAST(gen_random_uuid() AS text), '-', ''), rule_id,
               channel_id, rule_owner, :execution_id, :task_id, message_kind, event_type,
               payload
          FROM messages
        RETURNING message_kind
    )
    SELECT message_kind, count(*) AS n FROM inserted GROUP BY message_kind
    """  # noqa: S608 - fragments are module constants; values are bound


_ENQUEUE = sa.text(enqueue_sql())


def change_set_link(settings: AlertSettings, task_id: int) -> str:
    """Where a person reads the change set (the console's task changes page)."""
    return f"{settings.public_url.rstrip('/')}/tasks/{task_id}/changes"


def enqueue_alerts(
    conn: Connection, settings: AlertSettings, *, owner_id: int, execution_id: int, task_id: int
) -> dict[str, int]:
    """Create the change set's messages on ``conn`` (the analysis's transaction)."""
    rows = conn.execute(
        _ENQUEUE,
        {
            "owner_id": owner_id,
            "execution_id": execution_id,
            "task_id": task_id,
            "cap": settings.max_messages_per_run,
            "digest_changes": settings.digest_changes,
            "link": change_set_link(settings, task_id),
        },
    ).all()
    created = {r.message_kind: int(r.n) for r in rows}
    if created:
        emit("AlertMessagesCreated", execution_id=execution_id, **created)
    return created
