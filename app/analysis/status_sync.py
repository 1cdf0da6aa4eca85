"""Pushing gone / reappeared verdicts onto current assets in the search store (ANA-4).

After an execution's change set is committed, the endpoints it marked gone
or reappeared get their status written to both current-asset views:

* the owner's asset takes the owner's row of ``analysis_assets`` as it is *now*
  (not as this execution left it: a newer execution may have decided since,
  and pushing the present state makes a replay converge to it);
* the global asset is gone only when every owner holding the endpoint has it
  gone (one owner's scan never hides another owner's open port); its
  ``gone_since`` / ``gone_execution_id`` are those of the latest of them.

Pages of changes are read by keyset in short transactions; the store is
written with no connection held. Everything here is idempotent, so a worker
that crashes while pushing is simply followed by one that pushes again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import sqlalchemy as sa

from app.analysis.queue import AnalysisClaim
from app.db import transaction
from app.observability import emit
from app.search.ids import normalise_ip
from app.search.port import AssetStatusUpdate, BulkResult, SearchStore, StoreError

PAGE_ROWS = 2000

_PAGE = sa.text(
    """
    WITH page AS (
        SELECT id, ip, port, transport FROM analysis_changes
         WHERE execution_id = :execution_id AND kind IN ('gone', 'reappeared')
           AND id > :after
         ORDER BY id LIMIT :limit
    ), owner_rows AS (
        SELECT p.id, host(a.ip) AS ip, a.port, a.transport, a.status, a.gone_since,
               a.gone_execution_id
          FROM page p
          JOIN analysis_assets a ON a.owner_id = :owner_id AND a.ip = p.ip AND a.port = p.port
           AND a.transport = p.transport
    ), global_rows AS (
        SELECT e.ip, e.port, e.transport,
               CASE WHEN bool_or(a.status = 'open') THEN 'open' ELSE 'gone' END AS status,
               (array_agg(a.gone_since ORDER BY a.gone_since DESC NULLS LAST,
                          a.gone_execution_id DESC NULLS LAST))[1] AS gone_since,
               (array_agg(a.gone_execution_id ORDER BY a.gone_since DESC NULLS LAST,
                          a.gone_execution_id DESC NULLS LAST))[1] AS gone_execution_id
          FROM (SELECT DISTINCT ip, port, transport FROM page) e
          JOIN analysis_assets a ON a.ip = e.ip AND a.port = e.port AND a.transport = e.transport
         GROUP BY e.ip, e.port, e.transport
    )
    SELECT 'user' AS scope, id, ip, port, transport, status, gone_since, gone_execution_id
      FROM owner_rows
    UNION ALL
    SELECT 'global', NULL, host(ip), port, transport, status,
           CASE WHEN status = 'gone' THEN gone_since END,
           CASE WHEN status = 'gone' THEN gone_execution_id END
      FROM global_rows
    """
)


def push_statuses(
    claim: AnalysisClaim, store: SearchStore, *, check_lease: Callable[[], None]
) -> int:
    """Write the current status of every endpoint this execution marked gone or reappeared."""
    after = 0
    pushed = 0
    while True:
        check_lease()
        with transaction() as conn:
            rows = conn.execute(
                _PAGE,
                {
                    "execution_id": claim.execution_id,
                    "owner_id": claim.owner_id,
                    "after": after,
                    "limit": PAGE_ROWS,
                },
            ).all()
        user_ids = [r.id for r in rows if r.scope == "user"]
        if not rows:
            return pushed
        updates = [
            AssetStatusUpdate(
                scope=r.scope,
                owner_id=claim.owner_id if r.scope == "user" else None,
                ip=normalise_ip(r.ip),
                port=r.port,
                transport=r.transport,
                status=r.status,
                gone_since=r.gone_since if r.status == "gone" else None,
                gone_execution_id=r.gone_execution_id if r.status == "gone" else None,
            )
            for r in rows
        ]
        check_lease()
        result = store.apply_asset_status(updates)
        _raise_for_real_failures(result, claim)
        pushed += len(updates)
        if not user_ids:
            return pushed
        after = max(user_ids)
        if len(user_ids) < PAGE_ROWS:
            return pushed


def _raise_for_real_failures(result: BulkResult, claim: AnalysisClaim) -> None:
    """A missing document is not an error (it was removed); anything else is."""
    missing = [i for i in result.failed if i.status == 404]
    if missing:
        emit(
            "AnalysisAssetMissing",
            level=logging.WARNING,
            execution_id=claim.execution_id,
            documents=len(missing),
        )
    failures = [i for i in result.failed if i.status != 404]
    if failures:
        sample = ", ".join(f"{i.id}:{i.status}:{i.error_type}" for i in failures[:5])
        raise StoreError(f"{len(failures)} asset status updates failed ({sample})")
