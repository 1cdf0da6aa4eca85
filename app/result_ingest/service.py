"""One upload, stage by stage, with the commit boundaries of ING-1/ING-2.

1. validate (no I/O);
2. short transaction: lock the execution, check identity and streams, insert
   the pending receipt (or recognise a retry) — connection returned;
3. enrich and tag, write facts and execution-endpoint documents to the store
   with no database connection held;
4. non-final: short transaction confirming the receipt;
   final: plan and run refresh/count of exactly the final's index scope, then
   ONE transaction for everything that finishes the execution.

The response (``saved``) is computed only after the last commit returned its
connection.

Store failures are told apart (ING-16): a condition of the store (unreachable,
429, 5xx, timeouts, pool timeout) is a 503 with ``Retry-After`` and the batch
is retried as it is; a refusal of the content (an item the store rejects for
what it is, a 4xx answer, a PostgreSQL data error) is a 422 ``store_refused``
naming the items, because retrying the same batch can never succeed. The
refused batch's receipt stays ``pending``, so no final of the execution can
complete and nothing of it is counted: the scanner stops retrying and reports
the execution failed. Every stage is timed (``ScanWriteStageCompleted``) inside the
upload span, and a stage left by an error logs ``success=false``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.db import transaction
from app.errors import Conflict, PayloadTooLarge, Unavailable, Unprocessable, ValidationError
from app.observability import UPLOAD_SECONDS, add_span_attrs, emit, span, stage
from app.result_ingest import abandoned, dns, overlap
from app.result_ingest.enrichment import (
    UploadContext,
    apply_tags,
    endpoint_documents,
    fact_documents,
    normalise_observation,
)
from app.result_ingest.final import commit_final
from app.result_ingest.model import UploadBody
from app.result_ingest.parse import parse_upload
from app.result_ingest.receipts import collect_final_scope, confirm_batch, reserve_batch
from app.search.documents import month_of
from app.search.port import (
    BatchKey,
    BulkWriteError,
    ExecutionCounts,
    OperationTooLarge,
    RequestLineTooLong,
    SearchStore,
    StorageScope,
    StoreError,
    StoreRefused,
)


@dataclass(frozen=True)
class UploadResult:
    saved: int
    kind: str  # normal | final | confirmed_retry | dns


def upload_kind(body: UploadBody, execution_kind: str | None) -> str:
    if body.stream == "dns" or execution_kind == "dns" or body.dns_records:
        return "dns"
    return "final" if body.is_final else "normal"


def handle_upload(
    *,
    settings: Settings,
    store: SearchStore,
    execution_id: int,
    scanner_id: int | None,
    raw: Any,
    request_id: str | None = None,
) -> UploadResult:
    started = time.perf_counter()
    with span(
        "ScanResultUpload", request_id=request_id, scanner_id=scanner_id, execution_id=execution_id
    ):
        result = _handle(settings, store, execution_id, scanner_id, raw)
    UPLOAD_SECONDS.labels(result.kind).observe(time.perf_counter() - started)
    return result


def _refused(message: str, items: list[dict[str, Any]]) -> Unprocessable:
    return Unprocessable(
        f"the search store refused this batch ({message[:200]}); it cannot be stored as it "
        "is — do not retry it, report the execution failed",
        code="store_refused",
        details={"items": items[:100]},
    )


def _store_call(
    name: str, call, items_by_id: Callable[[], dict[str, dict[str, Any]]] | None = None
):
    """Run one store call inside its stage, mapping store failures to API errors.

    ``items_by_id`` maps document ids to the batch's items for a refusal; it is a
    function because only a refused batch needs it, and building it for every upload
    cost as much as a stage."""
    with stage(name):
        try:
            return call()
        except OperationTooLarge as exc:
            raise PayloadTooLarge(str(exc), code="operation_too_large") from None
        except RequestLineTooLong as exc:
            raise ValidationError(str(exc), code="request_line_too_long") from None
        except BulkWriteError as exc:
            permanent = exc.permanent_failures
            if not permanent:
                raise _unavailable(name, exc) from None
            emit("ScanStoreWriteRefused", stage=name, items=len(permanent))
            items = items_by_id() if items_by_id is not None else {}
            raise _refused(
                str(exc),
                [
                    {
                        **items.get(item.id, {"id": item.id}),
                        "status": item.status,
                        "error": item.error_type,
                        "message": (item.error_reason or "")[:300],
                    }
                    for item in permanent
                ],
            ) from None
        except StoreRefused as exc:
            emit("ScanStoreWriteRefused", stage=name, items=0)
            raise _refused(str(exc), []) from None
        except StoreError as exc:
            raise _unavailable(name, exc) from None


def _unavailable(name: str, exc: StoreError) -> Unavailable:
    emit("ScanStoreWriteFailed", stage=name, error=type(exc).__name__, message=str(exc)[:300])
    return Unavailable(
        "the search store did not accept the batch; retry with the same batch",
        code="store_unavailable",
        retry_after=getattr(exc, "retry_after", None) or 5,
    )


# Rounds of "count, then look for a dead attempt's late write" before the final gives up
# with a 503 (the scanner retries the final; ING-18, app.result_ingest.abandoned).
COUNT_ROUNDS = 3


def _final_counts(
    store: SearchStore,
    context: UploadContext,
    dead: tuple[abandoned.DeadBatch, ...],
    scope: StorageScope,
) -> ExecutionCounts:
    """Purge the batches of dead attempts, count, and count again if a late write of
    theirs landed meanwhile: no count includes a batch that was never confirmed."""

    def purge() -> int:
        return abandoned.purge(store, context, dead, scope)

    if dead:
        _store_call("purge_unconfirmed", purge)
    for _ in range(COUNT_ROUNDS):
        _store_call("refresh", lambda: store.refresh(scope))
        if scope.empty:
            counts = ExecutionCounts(observations=0, endpoints=0, ips=0)  # no count request
        else:
            counts = _store_call("count", lambda: store.count(scope, context.execution_id))
        if not dead or not _store_call("purge_unconfirmed", purge):
            return counts
    raise Unavailable(
        "a previous attempt of this execution is still writing; retry the final",
        code="store_unavailable",
        retry_after=5,
    )


def _remove_if_dead(
    store: SearchStore, context: UploadContext, body: UploadBody, exc: Conflict
) -> None:
    """After ``lease_lost`` following this batch's store write: when the execution has
    succeeded under another claim, remove what this batch wrote (the final purged the
    batch before counting, but this write may have landed after). Best effort: the
    scanner gets its ``lease_lost`` whatever happens here."""
    if exc.code != "lease_lost":
        return
    key = BatchKey(body.upload_id, body.stream, body.batch_index)
    try:
        with transaction("dead_batch_check") as conn:
            dead = abandoned.batch_is_dead(conn, context.execution_id, key)
            if dead is None:
                return
            live_scope = collect_final_scope(conn, context.execution_id, ())
        with stage("purge_unconfirmed"):
            abandoned.purge(store, context, [dead], live_scope)
    except (StoreError, Unavailable) as error:  # the store, or a busy database pool
        emit(
            "ScanUnconfirmedBatchPurgeFailed",
            level=logging.WARNING,
            error=type(error).__name__,
            message=str(error)[:300],
        )


def _item_of_position(body: UploadBody, position: int) -> dict[str, Any]:
    """Fact positions run over the observations, then the DNS records."""
    if position < len(body.observations):
        return {"list": "observations", "index": position}
    return {"list": "dns_records", "index": position - len(body.observations)}


# Items (observations and DNS records) from which a batch's fact write runs beside its
# endpoint write (``overlap.background``): one store shard, and the agent's default batch.
OVERLAP_MIN_ITEMS = 1000


def _write_facts(
    store: SearchStore, context: UploadContext, body: UploadBody, normalised: list[dict[str, Any]]
) -> None:
    facts = fact_documents(context, body, normalised)
    if facts:
        _store_call(
            "store_facts",
            lambda: store.write_facts(facts).raise_for_failures(),
            lambda: {doc.id: _item_of_position(body, p) for p, doc in enumerate(facts)},
        )


def _write_endpoints(
    store: SearchStore,
    context: UploadContext,
    normalised: list[dict[str, Any]],
    body: UploadBody,
) -> None:
    endpoints = endpoint_documents(context, normalised, (o.observed_at for o in body.observations))
    if not endpoints:
        return

    def endpoint_items() -> dict[str, dict[str, Any]]:
        first_index: dict[tuple[str, int, str], int] = {}
        for index, values in enumerate(normalised):
            first_index.setdefault((values["ip"], values["port"], values["transport"]), index)
        return {
            doc.id: {
                "list": "observations",
                "index": first_index.get((doc.ip, doc.port, doc.transport)),
            }
            for doc in endpoints
        }

    _store_call(
        "store_execution_endpoints",
        lambda: store.write_execution_endpoints(endpoints).raise_for_failures(),
        endpoint_items,
    )


def _handle(
    settings: Settings, store: SearchStore, execution_id: int, scanner_id: int | None, raw: Any
) -> UploadResult:
    with stage("validation"):
        body = parse_upload(raw, settings.ingest)
    add_span_attrs(
        upload_id=body.upload_id,
        stream=body.stream,
        batch_index=body.batch_index,
        is_final=body.is_final,
        protocol_version=body.protocol_version,
        observation_count=body.item_count,
    )
    months = tuple(
        sorted(
            {month_of(o.observed_at) for o in body.observations}
            | {month_of(r.observed_at) for r in body.dns_records}
        )
    )
    # ING-9: an index name that cannot fit the request-line budget fails before any write.
    _store_call("request_line_check", lambda: store.final_request_plan(StorageScope(months=months)))

    with stage("receipt_reserve"), transaction("receipt_reserve") as conn:
        reservation = reserve_batch(
            conn, execution_id=execution_id, scanner_id=scanner_id, body=body, months=months
        )
    if reservation.error is not None:
        raise reservation.error
    execution = reservation.execution
    add_span_attrs(task_id=execution.task_id)
    if reservation.outcome == "already_confirmed":
        emit("ScanUploadAlreadyConfirmed")
        return UploadResult(saved=0, kind="confirmed_retry")

    context = UploadContext(
        execution_id=execution_id,
        task_id=execution.task_id,
        owner_id=execution.owner_id,
        scanner_id=scanner_id,
        upload_id=body.upload_id,
        stream=body.stream,
        batch_index=body.batch_index,
        fact_ids=reservation.fact_ids,
    )
    with stage("enrichment"):
        normalised = [normalise_observation(o) for o in body.observations]
    with stage("tags"):
        normalised = [apply_tags(values) for values in normalised]
    # A large batch builds and writes its facts on a second thread (and pooled connection)
    # while this one builds and writes the endpoint documents: the two writes are
    # independent (each is idempotent, and the receipt is confirmed only once both
    # succeeded), so the database's half of the work overlaps ours. A small batch's writes
    # take a few milliseconds: not worth a second connection.
    if body.item_count >= OVERLAP_MIN_ITEMS:
        facts_written = overlap.background(
            lambda: _write_facts(store, context, body, normalised), name="netmap-upload-facts"
        )
    else:
        facts_written = overlap.inline(lambda: _write_facts(store, context, body, normalised))
    try:
        _write_endpoints(store, context, normalised, body)
    finally:
        facts_written()  # never leave a write running; its own failure is reported first

    kind = upload_kind(body, execution.kind)
    if not body.is_final:
        try:
            with stage("receipt_confirm"), transaction("receipt_confirm") as conn:
                confirmed = confirm_batch(conn, execution_id=execution_id, body=body)
                if confirmed:
                    dns.record_answers(conn, execution_id, list(body.dns_records))
        except Conflict as exc:
            _remove_if_dead(store, context, body, exc)
            raise
        return UploadResult(saved=body.item_count if confirmed else 0, kind=kind)

    scope = reservation.scope or StorageScope(months=months)
    plan = _store_call("final_request_plan", lambda: store.final_request_plan(scope))
    emit(
        "ScanFinalRequestPlan",
        refresh_requests=plan.refresh_requests,
        count_requests=plan.count_requests,
        max_request_line_bytes=plan.max_request_line_bytes,
        months=len(scope.months),
        legacy_full_history=scope.legacy_full_history,
    )
    counts = _final_counts(store, context, reservation.dead, scope)
    try:
        with stage("final_commit"), transaction("final_commit") as conn:
            finished = commit_final(
                conn,
                execution_id=execution_id,
                scanner_id=scanner_id,
                body=body,
                counts=counts,
                limits=settings.scan,
            )
    except Conflict as exc:
        _remove_if_dead(store, context, body, exc)
        raise
    if finished is None:
        emit("ScanUploadAlreadyConfirmed")
        return UploadResult(saved=0, kind="confirmed_retry")
    emit(
        "ScanExecutionSucceeded",
        observations=counts.observations,
        endpoints=counts.endpoints,
        ips=counts.ips,
    )
    return UploadResult(saved=body.item_count, kind=kind)  # "dns" or "final" here
