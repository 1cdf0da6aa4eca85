"""Phases 2 and 3 of one report: generate outside any transaction, then commit (REP-2..5).

``run_report`` takes a claimed report job through capture → generate →
commit. Generate draws the charts, builds the fixed render context and calls
the ``report-render`` module through a lease on the registry's current
generation (builtin or worker process); the host re-validates the subject,
HTML, size and echoed template version. Only the images the template actually
used are put into the object store, under keys that include the claim token,
so a refused commit can delete its own images without touching a winner's.

Commit is one short transaction that locks the job row, then the report row,
and re-checks the claim token, the lease, the report revision read by
capture and that the captured input is still complete (``input_still_complete``:
an execution deleted, superseded or running again since capture refuses the
commit; the job goes back to capture without spending an attempt and nothing is
archived or delivered); it archives statistics, the rendered mail and the image list, marks
the job done and creates the delivery rows. When it is refused or fails, the
images are deleted through the bounded compensation deleter.

Errors: temporary ones (renderer not ready, busy, deadline, IPC fault, a
crashed worker, a chart failure) requeue before anything is archived;
permanent ones (no published or a disabled template, template content, output
validation) commit the statistics with ``quality.mail_error`` and no mail.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from email.utils import make_msgid
from typing import Any, Protocol

import sqlalchemy as sa

from app.db import transaction
from app.leases import Heartbeat, LeaseGuard, LeaseLost
from app.modules.errors import ModuleError
from app.modules.registry import Lease
from app.object_store.deleter import delete_objects
from app.object_store.port import ObjectStore, ObjectStoreUnavailable
from app.observability import emit
from app.renderer import contract as render_contract
from app.reports import records
from app.reports.capture import (
    Capture,
    LeaseLostError,
    capture,
    input_checksum,
    input_still_complete,
    prepare_aggregates,
)
from app.reports.charts import ChartError, report_charts
from app.reports.records import ReportClaim
from app.search.port import SearchStore

DATA_WAIT_RETRY_SECONDS = 60.0


class RendererSource(Protocol):
    def acquire(self) -> Lease: ...


class TemporaryReportError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Rendered:
    subject: str
    html: str
    images_used: list[str]
    renderer: dict[str, Any]


@dataclass(frozen=True)
class ReportOutcome:
    result: str  # "ready" | "mail_error" | "retry_wait" | "failed" | "waiting" | "lease_lost"
    error: str | None = None


def render_payload(snapshot: Capture, images: dict[str, tuple[bytes, str]]) -> dict[str, Any]:
    template = snapshot.template
    assert template is not None
    return {
        "template": {
            "subject": template.subject,
            "html": template.html,
            "version": template.version,
        },
        "context": {
            "report": {"id": snapshot.report_id, "name": snapshot.report_name},
            "scope": {"label": snapshot.scope_label},
            "period": snapshot.period,
            "stats": snapshot.statistics,
            "completeness": snapshot.statistics["completeness"],
        },
        "images": [
            {"token": token, "url": f"cid:{token}", "alt": alt}
            for token, (_png, alt) in sorted(images.items())
        ],
    }


def generate(
    snapshot: Capture, renderer: RendererSource
) -> tuple[Rendered | None, str | None, dict[str, tuple[bytes, str]]]:
    """(rendered mail, None, images) or (None, permanent mail error, {}); temporary errors raise."""
    template = snapshot.template
    if template is None:
        return None, f"template {snapshot.template_name!r} has no published version", {}
    if not template.enabled:
        return None, f"template version {template.version!r} is disabled", {}
    try:
        images = report_charts(snapshot.statistics)
    except ChartError as exc:
        raise TemporaryReportError("chart", str(exc)) from exc
    payload = render_payload(snapshot, images)
    checksum = input_checksum(payload)
    try:
        with renderer.acquire() as lease:
            identity = lease.identity
            output = lease.invoke(render_contract.METHOD_RENDER, payload)
    except ModuleError as exc:
        if exc.retryable:
            raise TemporaryReportError(str(exc.kind), f"{exc.code}: {exc.message}") from exc
        return None, f"{exc.code}: {exc.message}", {}
    try:
        # The module is not trusted to have checked its own output.
        render_contract.validate_output(payload, output)
    except render_contract.RenderRejected as exc:
        return None, f"{exc.code}: {exc.message}", {}
    rendered = Rendered(
        subject=output["subject"],
        html=output["html"],
        images_used=list(output["images_used"]),
        renderer={
            "release_id": identity.release_id,
            "generation": identity.generation,
            "revision": identity.revision,
            "input_checksum": checksum,
        },
    )
    return rendered, None, images


def image_key(report_id: int, claim_token: uuid.UUID, token: str) -> str:
    return f"reports/{report_id}/{claim_token.hex}/{token}.png"


def commit(
    claim: ReportClaim,
    snapshot: Capture,
    rendered: Rendered | None,
    mail_error: str | None,
    stored_images: list[dict[str, str]],
    *,
    mail_domain: str,
) -> str:
    """Archive the report under the claim: ``committed``, ``refused`` (the claim or
    revision no longer holds) or ``input_incomplete`` (REP-3)."""
    with transaction() as conn:
        job = conn.execute(
            sa.text(
                "SELECT 1 FROM report_jobs WHERE report_id = :id AND claim_token = :token "
                "AND status = 'running' AND lease_expires_at > now() FOR UPDATE"
            ),
            {"id": claim.report_id, "token": claim.claim_token},
        ).scalar()
        if not job:
            return "refused"
        report = conn.execute(
            sa.text("SELECT revision, status FROM reports WHERE id = :id FOR UPDATE"),
            {"id": claim.report_id},
        ).one_or_none()
        if report is None or report.revision != snapshot.revision or report.status != "generating":
            return "refused"
        if not input_still_complete(conn, claim.report_id, snapshot.statistics):
            return "input_incomplete"
        quality: dict[str, Any] = {
            "renderer": rendered.renderer if rendered else None,
            "mail_error": mail_error,
            "complete": snapshot.statistics["complete"],
            "template": {
                "name": snapshot.template_name,
                "version": snapshot.template.version if snapshot.template else None,
            },
        }
        conn.execute(
            sa.text(
                """
                UPDATE reports
                   SET status = 'ready', statistics = CAST(:stats AS jsonb),
                       quality = CAST(:quality AS jsonb), subject = :subject, html = :html,
                       images = CAST(:images AS jsonb), error = NULL, finished_at = now(),
                       revision = revision + 1
                 WHERE id = :id
                """
            ),
            {
                "id": claim.report_id,
                "stats": _json(snapshot.statistics),
                "quality": _json(quality),
                "subject": rendered.subject if rendered else None,
                "html": rendered.html if rendered else None,
                "images": _json(stored_images),
            },
        )
        records.mark_job_done(conn, claim.report_id)
        if rendered is not None:
            for recipient in snapshot.recipients:
                conn.execute(
                    sa.text(
                        "INSERT INTO report_deliveries (report_id, recipient, message_id) "
                        "VALUES (:r, :to, :mid) ON CONFLICT (report_id, recipient) DO NOTHING"
                    ),
                    {
                        "r": claim.report_id,
                        "to": recipient,
                        "mid": make_msgid(f"report{claim.report_id}", domain=mail_domain),
                    },
                )
    return "committed"


def _json(value: Any) -> str:
    import json

    return json.dumps(value, default=str)


def run_report(
    claim: ReportClaim,
    *,
    renderer: RendererSource,
    object_store: ObjectStore,
    search_store: SearchStore,
    delete_concurrency: int,
    mail_domain: str = "netmap.local",
    heartbeat_seconds: float = 20.0,
    max_attempts: int = records.MAX_ATTEMPTS,
    wait_seconds: float = 1800.0,
    before_commit: Any = None,
) -> ReportOutcome:
    """Capture, generate and commit one claimed report (``before_commit`` is a test seam).

    The lease kit's heartbeat renews the job meanwhile; its guard is polled before each
    phase that writes (generate, storing images, commit), and the commit re-checks the
    token and the lease in the database whatever the guard said."""
    guard = LeaseGuard(claim.lease_seconds, claimed_at=time.monotonic())
    heartbeat = Heartbeat(
        lambda: records.renew(claim),
        guard,
        interval=heartbeat_seconds,
        name=f"report-heartbeat-{claim.report_id}",
        failed_event="ReportHeartbeatFailed",
        event_fields={"report_id": claim.report_id},
    ).start()
    stored: list[dict[str, str]] = []
    try:
        return _run_claimed(
            claim,
            guard,
            stored,
            renderer=renderer,
            object_store=object_store,
            search_store=search_store,
            delete_concurrency=delete_concurrency,
            mail_domain=mail_domain,
            max_attempts=max_attempts,
            wait_seconds=wait_seconds,
            before_commit=before_commit,
        )
    except LeaseLost as lost:
        _compensate(object_store, stored, delete_concurrency)
        emit(
            "ReportLeaseLost",
            level=logging.WARNING,
            report_id=claim.report_id,
            reason=lost.reason,
            operation=lost.operation,
        )
        return ReportOutcome("lease_lost", str(lost))
    finally:
        heartbeat.stop()


def _run_claimed(
    claim: ReportClaim,
    guard: LeaseGuard,
    stored: list[dict[str, str]],
    *,
    renderer: RendererSource,
    object_store: ObjectStore,
    search_store: SearchStore,
    delete_concurrency: int,
    mail_domain: str,
    max_attempts: int,
    wait_seconds: float,
    before_commit: Any,
) -> ReportOutcome:
    prepare_aggregates(claim.report_id, search_store)
    try:
        snapshot = capture(claim, store=search_store, wait_seconds=wait_seconds)
    except LeaseLostError as exc:
        return ReportOutcome("lease_lost", str(exc))
    if snapshot.wait_for_data:
        records.postpone(claim, seconds=DATA_WAIT_RETRY_SECONDS, reason="data incomplete")
        return ReportOutcome("waiting")
    guard.raise_if_lost()
    try:
        rendered, mail_error, images = generate(snapshot, renderer)
    except TemporaryReportError as exc:
        return _retry_later(claim, exc.kind, str(exc), max_attempts)
    guard.raise_if_lost()
    if rendered is not None:
        try:
            for token in rendered.images_used:
                png, _alt = images[token]
                key = image_key(claim.report_id, claim.claim_token, token)
                object_store.put(key, png, "image/png")
                stored.append({"token": token, "key": key, "content_type": "image/png"})
        except ObjectStoreUnavailable as exc:
            # An outage of the store: the report waits with the reason, as for a renderer
            # that is away (it stayed "generating", with no error, until its lease ran out).
            _compensate(object_store, stored, delete_concurrency)
            stored.clear()
            return _retry_later(claim, "object_store", f"object store: {exc}", max_attempts)
    if before_commit is not None:
        before_commit()
    guard.raise_if_lost()
    try:
        committed = commit(claim, snapshot, rendered, mail_error, stored, mail_domain=mail_domain)
    except Exception:
        _compensate(object_store, stored, delete_concurrency)
        raise
    if committed == "input_incomplete":
        _compensate(object_store, stored, delete_concurrency)
        emit("ReportInputIncomplete", level=logging.WARNING, report_id=claim.report_id)
        if not records.postpone(
            claim, seconds=DATA_WAIT_RETRY_SECONDS, reason="input incomplete at commit"
        ):
            return ReportOutcome("lease_lost", "commit refused")
        return ReportOutcome("waiting", "input incomplete at commit")
    if committed != "committed":
        _compensate(object_store, stored, delete_concurrency)
        emit("ReportCommitRefused", level=logging.WARNING, report_id=claim.report_id)
        return ReportOutcome("lease_lost", "commit refused")
    emit(
        "ReportCommitted",
        report_id=claim.report_id,
        images=len(stored),
        mail_error=mail_error is not None,
        recipients=len(snapshot.recipients) if rendered else 0,
    )
    return ReportOutcome("mail_error" if mail_error else "ready", mail_error)


def _retry_later(claim: ReportClaim, kind: str, error: str, max_attempts: int) -> ReportOutcome:
    """A temporary failure: the job waits (``retry_wait``, backoff) with ``error`` as its
    reason, or fails after its last attempt."""
    status = records.requeue_after_temporary_error(
        claim, kind=kind, error=error, max_attempts=max_attempts
    )
    emit(
        "ReportGenerateRetry",
        level=logging.WARNING,
        report_id=claim.report_id,
        attempt=claim.attempts,
        kind=kind,
        status=status,
    )
    if status is None:
        return ReportOutcome("lease_lost", error)
    return ReportOutcome("failed" if status == "failed" else "retry_wait", error)


def _compensate(object_store: ObjectStore, stored: list[dict[str, str]], concurrency: int) -> None:
    delete_objects(
        object_store,
        [image["key"] for image in stored],
        concurrency=concurrency,
        origin="report_commit_refused",
    )
