"""The final batch's single transaction (ING-2).

Everything that makes an execution "done" commits together: the final
receipt's confirmation, the execution's counts and success, the task's
aggregated status, the analysis-queue row, the projection-outbox row (ports
executions only: DNS-only results publish no endpoints), the DNS follow-up
task and target freshness. The claim is re-checked under the execution row
lock, so a scanner that lost its lease cannot finish an execution someone
else now owns. A copy of the final that arrives while the first copy is
committing finds the final receipt confirmed under the lock and reports
nothing saved (never ``lease_lost``: the execution succeeded with exactly
this batch).
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from app.analysis import queue as analysis_queue
from app.config import ScanSettings
from app.observability import stage
from app.projection import outbox
from app.result_ingest import dns
from app.result_ingest.model import UploadBody
from app.result_ingest.receipts import confirm_batch, lease_lost
from app.scan_control import freshness
from app.scan_control.dispatch import aggregate_task_status
from app.scan_control.executions import ExecutionRow, lock_for_upload, mark_succeeded
from app.search.port import ExecutionCounts


def final_already_confirmed(conn: Connection, execution_id: int, body: UploadBody) -> bool:
    status = conn.execute(
        sa.text(
            "SELECT status FROM scan_upload_receipts WHERE execution_id = :e AND upload_id = :u "
            "AND stream = :s AND batch_index = :b AND checksum = :c AND is_final"
        ),
        {
            "e": execution_id,
            "u": body.upload_id,
            "s": body.stream,
            "b": body.batch_index,
            "c": body.checksum.lower(),
        },
    ).scalar()
    return status == "confirmed"


def commit_final(
    conn: Connection,
    *,
    execution_id: int,
    scanner_id: int | None,
    body: UploadBody,
    counts: ExecutionCounts,
    limits: ScanSettings,
) -> ExecutionRow | None:
    """Finish the execution; None when a concurrent copy of this final already did."""
    with stage("final_lock_execution"):
        execution = lock_for_upload(conn, execution_id, scanner_id)
        if final_already_confirmed(conn, execution_id, body):
            return None
        if not execution.holds_claim(body.claim_token):
            raise lease_lost()
    with stage("receipt_confirm"):
        if not confirm_batch(conn, execution_id=execution_id, body=body):
            return None
        dns.record_answers(conn, execution_id, list(body.dns_records))
    with stage("execution_stats"):
        mark_succeeded(
            conn,
            execution_id,
            # Everything the execution stored: observations and DNS records.
            observations=counts.observations + counts.dns_records,
            endpoints=counts.endpoints,
            ips=counts.ips,
        )
    if execution.kind == "dns":
        # Before the aggregation: a DNS task stays open while its follow-up task runs.
        with stage("dns_subtask_generation"):
            dns.create_follow_up_task(
                conn,
                execution_id=execution_id,
                task_id=execution.task_id,
                owner_id=execution.owner_id,
                limits=limits,
            )
    with stage("task_aggregation"):
        aggregate_task_status(conn, execution.task_id)
    with stage("queue_entries"):
        analysis_queue.enqueue(conn, execution_id, execution.task_id)
        if execution.kind in ("ports", "import"):
            outbox.enqueue(conn, execution_id)
    with stage("target_freshness"):
        freshness.update_after_success(
            conn,
            execution_id=execution_id,
            task_id=execution.task_id,
            owner_id=execution.owner_id,
            kind=execution.kind,
            targets=execution.targets,
            started_at=execution.started_at,
            parent_task_id=execution.parent_task_id,
        )
    return execution
