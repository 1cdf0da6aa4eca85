"""Batches of a dead attempt: removed from the store before the final counts (ING-18).

A batch writes its facts and execution endpoints to the search store and then
confirms its receipt under the execution's claim. When the attempt's lease
expires between the two, the confirm fails (409 ``lease_lost``) and the receipt
stays ``pending`` under a claim that is no longer the execution's, while the
facts stay in the store under the execution id. The next attempt's final would
count them, and results, projection and analysis would read their endpoints.

Why purge rather than filter: counts, results, projection pages and the change
analysis all read the execution's endpoint documents, which merge every batch that
saw the same (ip, port, transport). Excluding one batch at read time would need
the batch identities inside every merged document and in every reader on both
adapters. Removing what the dead batch wrote, once, before the count, leaves
every reader as it is.

What the final does, with no database connection held (``purge``):

1. the dead batches are the execution's receipts still ``pending`` under another
   claim than the final's (read in the final's reservation transaction: no new
   one can appear afterwards, since only the claim holder reserves);
2. their facts are read from the store (refreshed first), and the endpoints they
   touched are **rebuilt** from the execution's other facts (the confirmed batches
   and the final's own): deleted, then merged again from those facts — so an
   endpoint a confirmed batch also saw keeps exactly what that batch saw, and one
   only the dead batch saw disappears;
3. the dead facts are deleted last, so a purge cut short by a failure is simply
   redone by the final's retry (the facts still name the endpoints to rebuild).

The late write: a request of the dead attempt may still be in flight and land its
store write after the purge. ``service`` therefore purges again after the count;
if that finds facts, they landed meanwhile and the count is taken again (a few
rounds, then 503 for the scanner's retry). And a dead request that gets
``lease_lost`` after its own store write, once the execution has succeeded (no
writer of the execution is left to race with), purges its own batch. A dead
request's write landing between the final's last check and its commit, whose
request then dies before that purge, is the one case left.

The receipts themselves stay ``pending`` (never confirmed): the final's scope and
every other reader look at confirmed receipts only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from uuid import UUID

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.observability import emit
from app.result_ingest.enrichment import UploadContext, endpoint_documents
from app.scan_control.executions import succeeded_claim
from app.search.ids import execution_endpoint_id
from app.search.port import BatchKey, SearchStore, StorageScope


@dataclass(frozen=True)
class DeadBatch:
    key: BatchKey
    months: tuple[str, ...] | None  # None: a legacy receipt without storage references


def dead_batches(conn: Connection, execution_id: int, claim_token: UUID) -> list[DeadBatch]:
    """Receipts of the execution still pending under another claim than ``claim_token``.

    ``(status = 'pending' OR is_final)`` is the predicate of the partial index of open
    receipts: a handful of rows, never the execution's confirmed history.
    """
    rows = conn.execute(
        sa.text(
            "SELECT upload_id, stream, batch_index, storage_references "
            "FROM scan_upload_receipts WHERE execution_id = :e "
            "AND (status = 'pending' OR is_final) AND status = 'pending' "
            "AND claim_token IS DISTINCT FROM :t "
            "ORDER BY upload_id, stream, batch_index"
        ),
        {"e": execution_id, "t": claim_token},
    ).all()
    return [
        _dead_batch(BatchKey(r.upload_id, r.stream, r.batch_index), r.storage_references)
        for r in rows
    ]


def batch_is_dead(conn: Connection, execution_id: int, key: BatchKey) -> DeadBatch | None:
    """The batch when its receipt is pending under another claim than the one the
    execution succeeded with; ``None`` otherwise (confirmed, taken over by the live claim,
    or the execution not finished: its final purges the batch then, with no writer of
    the execution left to race with)."""
    token = succeeded_claim(conn, execution_id)
    if token is None:
        return None
    row = conn.execute(
        sa.text(
            "SELECT storage_references FROM scan_upload_receipts "
            "WHERE execution_id = :e AND upload_id = :u AND stream = :s AND batch_index = :b "
            "AND status = 'pending' AND claim_token IS DISTINCT FROM :t"
        ),
        {
            "e": execution_id,
            "u": key.upload_id,
            "s": key.stream,
            "b": key.batch_index,
            "t": token,
        },
    ).one_or_none()
    return None if row is None else _dead_batch(key, row.storage_references)


def _dead_batch(key: BatchKey, storage_references: Sequence[str] | None) -> DeadBatch:
    return DeadBatch(key, None if storage_references is None else tuple(storage_references))


def scope_of(batches: Iterable[DeadBatch], base: StorageScope | None = None) -> StorageScope:
    months = set(base.months) if base is not None else set()
    legacy = base.legacy_full_history if base is not None else False
    for batch in batches:
        if batch.months is None:
            legacy = True
        else:
            months.update(batch.months)
    return StorageScope(months=tuple(sorted(months)), legacy_full_history=legacy)


def purge(
    store: SearchStore,
    context: UploadContext,
    batches: Sequence[DeadBatch],
    live_scope: StorageScope,
) -> int:
    """Remove what ``batches`` wrote for ``context.execution_id``; returns the facts removed.

    ``live_scope`` holds the months of the execution's other facts (the final's scope),
    from which the touched endpoints are rebuilt. Store failures propagate as they are
    (the caller maps them); everything here can be redone.
    """
    if not batches:
        return 0
    execution_id = context.execution_id
    dead_scope = scope_of(batches)
    whole_scope = scope_of(batches, live_scope)
    store.refresh(whole_scope)
    facts = store.batch_facts(dead_scope, execution_id, [b.key for b in batches])
    if not facts:
        return 0
    dead_keys = {batch.key for batch in batches}
    touched = {
        (fact.body["ip"], fact.body["port"], fact.body["transport"])
        for fact in facts
        if fact.kind == "observation"
    }
    if touched:
        kept = [
            fact
            for fact in store.endpoint_facts(whole_scope, execution_id, touched)
            if BatchKey(fact.upload_id, fact.stream, fact.batch_index) not in dead_keys
        ]
        rebuilt = endpoint_documents(
            context, [dict(f.body) for f in kept], [f.observed_at for f in kept]
        )
        store.delete_execution_endpoints(
            execution_id,
            [execution_endpoint_id(execution_id, *endpoint) for endpoint in sorted(touched)],
        ).raise_for_failures()
        if rebuilt:
            store.write_execution_endpoints(rebuilt).raise_for_failures()
    store.delete_facts(facts).raise_for_failures()
    store.refresh(whole_scope)  # readers see the removal at once
    emit(
        "ScanUnconfirmedBatchesPurged",
        execution_id=execution_id,
        batches=len(batches),
        facts=len(facts),
        endpoints=len(touched),
    )
    return len(facts)
