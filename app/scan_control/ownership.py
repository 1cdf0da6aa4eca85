"""Which executions belong to whom, as SQL other owners' queries embed.

Scan control owns ``scan_tasks`` and ``scan_executions``; a package whose rows are keyed
by execution (the DNS answers of ``app.result_ingest``) scopes them to an owner by
embedding this subquery instead of joining those tables itself. It binds ``:owner_id``;
deleted tasks are nobody's.
"""

from __future__ import annotations

OWNER_EXECUTION_IDS_SQL = (
    "SELECT e.id FROM scan_executions e JOIN scan_tasks t ON t.id = e.task_id "
    "WHERE t.owner_id = :owner_id AND t.deleted_at IS NULL"
)
