"""Upload receipts and streams: reserving a batch, confirming it, retries (ING-1, -3, -5, -6, -7).

A batch's identity is (execution_id, upload_id, stream, batch_index). The
first transaction of an upload locks the execution row, checks the claim and
the upload's stream counters (``scan_upload_stream``, maintained by triggers —
never a scan of historical receipts) and inserts a ``pending`` receipt; the
store writes happen after it commits; a second short transaction confirms the
receipt. Retries of the same identity are recognised here:

* confirmed with the same checksum → nothing to do (``saved=0``);
* pending with the same checksum → the store writes are redone (ids are
  deterministic) and the receipt confirmed — also under a new claim (a batch a
  dead attempt left pending), except once that claim has reserved its final
  (409 ``final_already_reserved``: the final counts without the batch and removes
  what the dead attempt wrote of it, ``abandoned``);
* another checksum → 409 ``checksum_mismatch``.

The main stream's final batch is accepted only when batches ``0..final-1`` are
present, contiguous and all confirmed, the DNS sidecar has nothing pending,
and no batch of the execution is pending under any other upload id (a batch
is all or nothing, ING-18: facts of a batch that was never confirmed must not be
counted by a final); inserting the final receipt reserves the final, after
which new batches of the execution, under any upload id, get 409
``final_already_reserved``. The checks within an upload read
``scan_upload_stream`` (one row per upload and stream); those across upload
ids read only the current claim's pending and final receipts (a partial
index), never the execution's history.

A DNS sidecar batch is accepted when its index lies inside the main stream's
contiguously confirmed range 0..n (ING-7), also while later main batches are
still pending: then n is just below the lowest pending main batch, read from
the same partial index. When the main stream has a gap (0..1 confirmed, 2 not
yet sent, 3 confirmed) the counters cannot say where the prefix ends; then the
batch's own prefix 0..index is counted through the primary key (bounded by the
index, never the upload's whole history).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.errors import Conflict, ValidationError
from app.observability import emit, stage
from app.result_ingest.abandoned import DeadBatch, dead_batches
from app.result_ingest.model import UploadBody
from app.result_ingest.scope import check_scope
from app.scan_control.executions import (
    ExecutionRow,
    claim_held_sql,
    lock_for_upload,
    raise_if_cancelled,
)
from app.search.ids import FACT_ID_SCHEME
from app.search.migrate import has_migrated_history
from app.search.port import StorageScope


@dataclass(frozen=True)
class StreamState:
    batch_count: int = 0
    confirmed_count: int = 0
    pending_count: int = 0
    min_batch: int | None = None
    max_batch: int | None = None
    final_count: int = 0
    final_batch: int | None = None

    @property
    def contiguous(self) -> bool:
        """Batches 0..max_batch are all present (confirmed or pending)."""
        return (
            self.batch_count > 0
            and self.min_batch == 0
            and self.max_batch is not None
            and self.batch_count == self.max_batch + 1
        )

    @property
    def contiguous_confirmed_max(self) -> int | None:
        """Highest index of a fully confirmed 0..n range when nothing is pending, else None
        (with pending batches the counters alone cannot say where the range ends)."""
        if self.pending_count or not self.contiguous:
            return None
        return self.max_batch


@dataclass(frozen=True)
class Reservation:
    """What the first transaction decided about a batch."""

    outcome: str  # "new" | "retry_pending" | "already_confirmed" | "rejected"
    execution: ExecutionRow
    scope: StorageScope | None = None  # final batches only
    # Final batches only: batches pending under a dead claim, purged before the count.
    dead: tuple[DeadBatch, ...] = ()
    # "rejected": the batch is refused, but a stream repair made in the same
    # transaction must still commit; the caller raises this after commit.
    error: Conflict | None = None
    # The fact id scheme the batch's facts are written under: the receipt's own on a
    # retry (``app.search.ids.FACT_ID_SCHEME``), so a redo rewrites the very same ids.
    fact_ids: int = FACT_ID_SCHEME


def lease_lost() -> Conflict:
    return Conflict("this scanner no longer holds the claim on the execution", code="lease_lost")


def check_stream_rules(execution: ExecutionRow, body: UploadBody) -> None:
    """Which streams and payloads an execution kind accepts (400s, before any write)."""
    if body.kind is not None and body.kind != execution.kind:
        raise ValidationError(
            f"kind {body.kind!r} does not match the execution's kind {execution.kind!r}",
            code="invalid_upload",
            details={"items": [{"field": "kind", "message": "does not match the execution"}]},
        )
    problems: list[dict[str, Any]] = []
    if body.stream == "dns":
        if execution.kind == "dns":
            problems.append({"field": "stream", "message": "dns executions upload on 'main'"})
        if body.is_final:
            problems.append({"field": "is_final", "message": "the DNS sidecar has no final"})
        if body.observations:
            problems.append(
                {"field": "observations", "message": "the DNS sidecar carries dns_records"}
            )
    elif execution.kind == "dns" and body.observations:
        problems.append({"field": "observations", "message": "dns executions upload dns_records"})
    elif execution.kind in ("ports", "import") and body.dns_records:
        problems.append(
            {"field": "dns_records", "message": "send DNS records of a port scan on stream 'dns'"}
        )
    if problems:
        raise ValidationError(
            "upload does not fit the execution", code="invalid_upload", details={"items": problems}
        )


def read_streams(
    conn: Connection, execution_id: int, upload_id: str
) -> tuple[dict[str, StreamState], bool]:
    """This upload's stream rows, repairing any marked dirty by receipt deletes.

    Returns the streams and whether a repair was made.
    """
    rows = conn.execute(
        sa.text(
            "SELECT stream, batch_count, confirmed_count, pending_count, min_batch, max_batch, "
            "final_count, final_batch, dirty FROM scan_upload_stream "
            "WHERE execution_id = :e AND upload_id = :u"
        ),
        {"e": execution_id, "u": upload_id},
    ).all()
    if any(r.dirty for r in rows):
        for row in rows:
            if row.dirty:
                conn.execute(
                    sa.text("SELECT scan_upload_stream_repair(:e, :u, :s)"),
                    {"e": execution_id, "u": upload_id, "s": row.stream},
                )
                emit("ScanUploadStreamRepaired", execution_id=execution_id, stream=row.stream)
        streams, _ = read_streams(conn, execution_id, upload_id)
        return streams, True
    return {
        r.stream: StreamState(
            batch_count=r.batch_count,
            confirmed_count=r.confirmed_count,
            pending_count=r.pending_count,
            min_batch=r.min_batch,
            max_batch=r.max_batch,
            final_count=r.final_count,
            final_batch=r.final_batch,
        )
        for r in rows
    }, False


# The pending main batches of one upload; (status = 'pending' OR is_final) is the
# predicate of the partial index ix_scan_upload_receipts_open, so the planner reads
# that index (a handful of open receipts) instead of the upload's confirmed history.
PENDING_MAIN_BATCHES = (
    "SELECT batch_index FROM scan_upload_receipts "
    "WHERE execution_id = :e AND (status = 'pending' OR is_final) "
    "AND status = 'pending' AND upload_id = :u AND stream = 'main'"
)


def sidecar_limit(
    conn: Connection, execution_id: int, upload_id: str, main: StreamState
) -> int | None:
    """ING-7: the end of the main stream's contiguously confirmed range 0..n, or None.

    Without pending main batches the stream counters say it. With some pending (a
    scanner with several batches in flight), the range ends just below the lowest
    pending index, read from the partial index of open receipts (pending or final:
    a handful per execution, never the upload's history). A main stream with a gap
    (a batch sent out of order) has no range the counters can vouch for: the sidecar
    batch is refused and its retry succeeds once the gap is filled.
    """
    if not main.contiguous:
        return None  # a gap: prefix_confirmed() decides for the batch's own index
    if not main.pending_count:
        return main.max_batch
    pending = conn.execute(
        sa.text(PENDING_MAIN_BATCHES), {"e": execution_id, "u": upload_id}
    ).scalars()
    lowest = min(pending, default=None)
    if lowest is None:  # confirmed meanwhile: the counters were read before
        return main.max_batch
    return lowest - 1 if lowest > 0 else None


# Main batches 0..:i of one upload that are confirmed: a primary-key range scan of
# at most i + 1 entries (the sidecar batch's own index bounds it, not the history).
CONFIRMED_MAIN_PREFIX = (
    "SELECT count(*) FROM scan_upload_receipts "
    "WHERE execution_id = :e AND upload_id = :u AND stream = 'main' "
    "AND batch_index BETWEEN 0 AND :i AND status = 'confirmed'"
)


def prefix_confirmed(conn: Connection, execution_id: int, upload_id: str, index: int) -> bool:
    """ING-7 with a gap in the main stream (0..1 confirmed, 2 not sent, 3 confirmed):
    the sidecar batch ``index`` is inside the confirmed prefix when main batches
    0..index are all there and confirmed, whatever lies beyond the gap."""
    count = conn.execute(
        sa.text(CONFIRMED_MAIN_PREFIX), {"e": execution_id, "u": upload_id, "i": index}
    ).scalar_one()
    return count == index + 1


def _check_new_batch(
    conn: Connection, execution_id: int, body: UploadBody, streams: dict[str, StreamState]
) -> None:
    main = streams.get("main", StreamState())
    if main.final_count:
        raise Conflict(
            f"the final batch ({main.final_batch}) of this upload is already reserved",
            code="final_already_reserved",
            details={"final_batch": main.final_batch},
        )
    if body.stream == "dns":
        limit = main.contiguous_confirmed_max
        if limit is None or body.batch_index > limit:
            limit = sidecar_limit(conn, execution_id, body.upload_id, main)
        if limit is None and main.batch_count and not main.contiguous:
            if prefix_confirmed(conn, execution_id, body.upload_id, body.batch_index):
                return
        if limit is None or body.batch_index > limit:
            raise Conflict(
                "a DNS sidecar batch must fall inside the main upload's confirmed, "
                "contiguous batch range",
                code="batch_gap",
                details={
                    "batch_index": body.batch_index,
                    "confirmed_range": None if limit is None else [0, limit],
                    "main_pending": main.pending_count,
                },
            )
        return
    if body.is_final:
        expected = body.batch_index
        contiguous = (
            main.batch_count == 0
            if expected == 0
            else (
                main.batch_count == expected
                and main.min_batch == 0
                and main.max_batch == expected - 1
            )
        )
        sidecar = streams.get("dns", StreamState())
        if not contiguous or main.pending_count or sidecar.pending_count:
            raise Conflict(
                _gap_message(expected, main, sidecar),
                code="batch_gap",
                details={
                    "batch_index": expected,
                    "batches": main.batch_count,
                    "min_batch": main.min_batch,
                    "max_batch": main.max_batch,
                    "pending": main.pending_count,
                    "dns_pending": sidecar.pending_count,
                },
            )


def _gap_message(final_index: int, main: Any, sidecar: Any) -> str:
    """Why a final cannot be accepted, naming what is actually wrong (the details carry
    the counts): batches past the final, batches missing below it, pending ones."""
    if main.max_batch is not None and main.max_batch >= final_index:
        return (
            f"final batch {final_index} would end the upload, but batch {main.max_batch} of "
            f"it was sent already: the final is the upload's last index "
            f"(send it as {main.max_batch + 1} or later)"
        )
    if main.pending_count or sidecar.pending_count:
        return (
            f"final batch {final_index} waits for {main.pending_count} pending batch(es) and "
            f"{sidecar.pending_count} pending DNS sidecar batch(es) to be confirmed; retry them"
        )
    return (
        f"final batch {final_index} needs batches 0..{final_index - 1}: "
        f"{final_index - main.batch_count} of them are missing"
    )


def _final_already_reserved(final: Any) -> Conflict:
    """409 naming the upload whose final (a receipt row) is reserved."""
    return Conflict(
        f"the final batch of upload {final.upload_id!r} is already reserved for this execution",
        code="final_already_reserved",
        details={"upload_id": final.upload_id, "final_batch": final.batch_index},
    )


def check_other_uploads(conn: Connection, execution_id: int, body: UploadBody) -> None:
    """409 when another upload of this claim has reserved its final (for any new batch)
    or, for a final, still has a pending batch.

    Only receipts of the current claim count: an attempt whose lease expired left its
    receipts behind, and the next attempt must not wait for batches nobody will send.
    """
    rows = conn.execute(
        sa.text(
            "SELECT upload_id, stream, batch_index, is_final, status "
            "FROM scan_upload_receipts WHERE execution_id = :e AND claim_token = :t "
            "AND (status = 'pending' OR is_final) AND upload_id <> :u "
            "ORDER BY upload_id, stream, batch_index LIMIT 20"
        ),
        {"e": execution_id, "t": body.claim_token, "u": body.upload_id},
    ).all()
    final = next((r for r in rows if r.is_final), None)
    if final is not None:
        raise _final_already_reserved(final)
    pending = [r for r in rows if r.status == "pending"]
    if body.is_final and pending:
        raise Conflict(
            "another upload of this execution has a batch that is not confirmed yet; "
            "the final waits until it is confirmed",
            code="batch_gap",
            details={
                "pending": [
                    {"upload_id": r.upload_id, "stream": r.stream, "batch_index": r.batch_index}
                    for r in pending
                ]
            },
        )


def check_takeover(conn: Connection, execution_id: int, body: UploadBody) -> None:
    """409 ``final_already_reserved`` for the retry of a batch another claim left pending
    once this claim has reserved a final: that final counts without the batch and removes
    what the dead attempt wrote of it (ING-18), so the batch cannot join any more."""
    final = conn.execute(
        sa.text(
            "SELECT upload_id, batch_index FROM scan_upload_receipts "
            "WHERE execution_id = :e AND (status = 'pending' OR is_final) AND is_final "
            "AND claim_token = :t AND NOT (upload_id = :u AND stream = :s AND batch_index = :b) "
            "LIMIT 1"
        ),
        {
            "e": execution_id,
            "t": body.claim_token,
            "u": body.upload_id,
            "s": body.stream,
            "b": body.batch_index,
        },
    ).one_or_none()
    if final is not None:
        raise _final_already_reserved(final)


def earlier_aliases(conn: Connection, execution_id: int) -> list[str]:
    """CNAME targets this DNS execution already confirmed (names it may now report)."""
    return list(
        conn.execute(
            sa.text(
                "SELECT DISTINCT value FROM scan_dns_answers "
                "WHERE execution_id = :e AND type = 'CNAME'"
            ),
            {"e": execution_id},
        ).scalars()
    )


def collect_final_scope(
    conn: Connection, execution_id: int, current_months: tuple[str, ...]
) -> StorageScope:
    """ING-8/ING-11: fact months of this execution's confirmed receipts plus this batch's.

    Every upload id of the execution, not only the final's: another upload of the same
    claim and a previous attempt's confirmed batches stored facts of this execution
    too, and a month left out of the scope is a fact left out of the count
    (tests/integration/test_upload_final_scope.py; docs/architecture.md, "Upload").
    """
    row = conn.execute(
        sa.text(
            """
            SELECT ARRAY(
                     SELECT DISTINCT m FROM scan_upload_receipts r,
                            unnest(r.storage_references) AS m
                     WHERE r.execution_id = :e AND r.status = 'confirmed'
                   ) AS months,
                   EXISTS (
                     SELECT 1 FROM scan_upload_receipts r
                     WHERE r.execution_id = :e AND r.status = 'confirmed'
                       AND r.observation_count > 0 AND r.storage_references IS NULL
                   ) AS legacy
            """
        ),
        {"e": execution_id},
    ).one()
    months = tuple(sorted(set(row.months) | set(current_months)))
    legacy = bool(row.legacy)
    if legacy:
        emit(
            "ScanSummaryLegacyIndexScope",
            level=logging.WARNING,
            execution_id=execution_id,
            reason="confirmed receipts without storage references",
        )
    elif has_migrated_history(conn, execution_id):
        # ING-11: history moved from PostgreSQL to Elasticsearch reads every month.
        legacy = True
        emit(
            "ScanSummaryLegacyIndexScope",
            level=logging.WARNING,
            execution_id=execution_id,
            reason="confirmed receipts stored before the history was migrated",
        )
    return StorageScope(months=months, legacy_full_history=legacy)


def _existing_receipt(
    conn: Connection, key: dict[str, Any], body: UploadBody, execution: ExecutionRow
) -> Any:
    """The upload identity: the receipt this batch's identity already has, if any.

    The same identity with another checksum is 409 ``checksum_mismatch`` for the claim's
    holder, and ``lease_lost`` for anyone else (who is to stop, not to start a new upload
    id); a confirmed one is a retry for the claim that confirmed it (or the current
    one), else ``lease_lost``."""
    existing = conn.execute(
        sa.text(
            "SELECT status, checksum, is_final, claim_token, fact_ids FROM scan_upload_receipts "
            "WHERE execution_id = :e AND upload_id = :u AND stream = :s AND batch_index = :b"
        ),
        key,
    ).one_or_none()
    if existing is None:
        return None
    token = body.claim_token
    if existing.checksum != body.checksum.lower() or existing.is_final != body.is_final:
        if not execution.holds_claim(token):
            raise lease_lost()
        raise Conflict(
            "a batch with this identity was received with other content",
            code="checksum_mismatch",
            details={
                "upload_id": body.upload_id,
                "stream": body.stream,
                "batch_index": body.batch_index,
            },
        )
    if (
        existing.status == "confirmed"
        and existing.claim_token != token
        and not execution.holds_claim(token)
    ):
        raise lease_lost()
    return existing


def reserve_batch(
    conn: Connection,
    *,
    execution_id: int,
    scanner_id: int | None,
    body: UploadBody,
    months: tuple[str, ...],
) -> Reservation:
    # OBS-2: the upload's stages inside the reservation — auth (the execution lock and
    # the scanner's hold on it), upload identity, final continuity.
    with stage("auth"):
        execution = lock_for_upload(conn, execution_id, scanner_id)
        check_stream_rules(execution, body)
    check_scope(
        kind=execution.kind,
        targets=execution.targets,
        ports=execution.ports,
        transports=list(execution.transports),
        body=body,
        earlier_aliases=(
            earlier_aliases(conn, execution_id)
            if execution.kind == "dns" and body.dns_records
            else ()
        ),
    )
    key = {
        "e": execution_id,
        "u": body.upload_id,
        "s": body.stream,
        "b": body.batch_index,
    }
    with stage("upload_identity"):
        existing = _existing_receipt(conn, key, body, execution)
    token = body.claim_token
    if existing is not None:
        if existing.status == "confirmed":
            return Reservation("already_confirmed", execution)
        if not execution.holds_claim(token):
            raise lease_lost()
        if existing.claim_token != token:
            check_takeover(conn, execution_id, body)
            conn.execute(
                sa.text(
                    "UPDATE scan_upload_receipts SET claim_token = :t WHERE execution_id = :e "
                    "AND upload_id = :u AND stream = :s AND batch_index = :b"
                ),
                {**key, "t": token},
            )
        reservation = _reserved(conn, "retry_pending", execution, body, months)
        return dataclasses.replace(reservation, fact_ids=existing.fact_ids)

    if not execution.holds_claim(token):
        raise lease_lost()
    with stage("final_continuity"):
        streams, repaired = read_streams(conn, execution_id, body.upload_id)
        try:
            # Another upload's reserved final first: "nothing more to send" must not read
            # as a gap the scanner could fill (a sidecar batch of a new upload id, say).
            check_other_uploads(conn, execution_id, body)
            _check_new_batch(conn, execution_id, body, streams)
        except Conflict as exc:
            if repaired:
                return Reservation("rejected", execution, error=exc)
            raise
    conn.execute(
        sa.text(
            """
            INSERT INTO scan_upload_receipts
                   (execution_id, upload_id, stream, batch_index, is_final, checksum,
                    observation_count, status, claim_token, storage_references, fact_ids)
            VALUES (:e, :u, :s, :b, :final, :checksum, :count, 'pending', :t, :months,
                    :fact_ids)
            """
        ),
        {
            **key,
            "final": body.is_final,
            "checksum": body.checksum.lower(),
            "count": body.item_count,
            "t": token,
            "months": list(months),
            "fact_ids": FACT_ID_SCHEME,  # what ``Reservation.fact_ids`` says for "new"
        },
    )
    return _reserved(conn, "new", execution, body, months)


def _reserved(
    conn: Connection,
    outcome: str,
    execution: ExecutionRow,
    body: UploadBody,
    months: tuple[str, ...],
) -> Reservation:
    """The reservation of a batch to store; a final also gets the scope it counts and
    the dead attempts' batches it removes first."""
    if not body.is_final:
        return Reservation(outcome, execution)
    return Reservation(
        outcome,
        execution,
        collect_final_scope(conn, execution.id, months),
        tuple(dead_batches(conn, execution.id, body.claim_token)),
    )


def confirm_batch(conn: Connection, *, execution_id: int, body: UploadBody) -> bool:
    """Pending → confirmed under a valid claim; False when another request confirmed it first."""
    confirmed = conn.execute(
        sa.text(
            f"""
            UPDATE scan_upload_receipts r
               SET status = 'confirmed', confirmed_at = now()
             WHERE r.execution_id = :e AND r.upload_id = :u AND r.stream = :s
               AND r.batch_index = :b AND r.status = 'pending'
               AND {claim_held_sql("r.execution_id", ":t")}
            RETURNING 1
            """  # noqa: S608 - the claim condition is scan control's fixed SQL; values are bound
        ),
        {
            "e": execution_id,
            "u": body.upload_id,
            "s": body.stream,
            "b": body.batch_index,
            "t": body.claim_token,
        },
    ).scalar()
    if confirmed:
        return True
    status = conn.execute(
        sa.text(
            "SELECT status FROM scan_upload_receipts WHERE execution_id = :e AND upload_id = :u "
            "AND stream = :s AND batch_index = :b"
        ),
        {"e": execution_id, "u": body.upload_id, "s": body.stream, "b": body.batch_index},
    ).scalar()
    if status == "confirmed":
        return False
    raise_if_cancelled(conn, execution_id)
    raise lease_lost()
