"""The report renderer in one process: start-up, the refresh loop, publish and status.

Every web and runner process owns one ``ReportRenderService``. At start-up it
inserts the default selection (never overwriting one) and applies the stored
selection; database failures here are start-up errors, while a selected
release that is missing or broken leaves the process running with rendering
unavailable and the error visible (MOD-7, no silent fallback to builtin). The
refresh loop then reads the selection every ``refresh_seconds`` and applies
any higher revision directly, and restarts the same selection at the same
revision when the applied generation became unhealthy (a crashed worker).

``publish`` is the admin path (MOD-8): prepare and self-test the candidate,
then an optimistic revision bump (selection and its history row) in one short
transaction, then the switch here; other processes follow through their
refresh loops. The admin action is audited after that, in its own short
transaction: only a selection that was saved is audited (a rejected candidate,
a conflict or a database failure leaves no ``module.publish`` row), and an
audit write that fails cannot undo a publish that already happened.
"""

from __future__ import annotations

import atexit
import logging
import threading
import weakref
from dataclasses import dataclass
from typing import Any

from app.config import Settings
from app.db import transaction
from app.errors import ApiError, Unavailable, ValidationError
from app.identity.audit import record_audit
from app.modules import selection as sel
from app.modules.errors import CandidateRejected, StaleRevision
from app.modules.registry import GenerationIdentity, Lease, ModuleRegistry
from app.modules.report_render import (
    SLOT_NAME,
    confirm_alive,
    open_candidate,
    report_render_slot,
)
from app.observability import emit

MAX_CHANGE_REASON = 500


class PendingActivation(Unavailable):
    """The new selection is stored, but this process could not switch to it yet."""

    code = "pending_activation"

    def __init__(self, persisted_revision: int, reason: str):
        super().__init__(
            f"revision {persisted_revision} is saved but not active on this instance: {reason}; "
            "it will be retried by the refresh loop (do not resend with the old expectedRevision)",
            retry_after=5,
            details={"persistedRevision": persisted_revision, "pendingActivation": True},
        )
        self.persisted_revision = persisted_revision

    def body(self) -> dict[str, Any]:
        body = super().body()
        body["persistedRevision"] = self.persisted_revision
        body["pendingActivation"] = True
        return body


@dataclass(frozen=True)
class PublishResult:
    revision: int
    release_id: str
    applied: GenerationIdentity | None


class ReportRenderService:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.registry = ModuleRegistry(
            [report_render_slot(settings)],
            drain_timeout=settings.report_renderer.drain_timeout_seconds,
        )
        self.last_refresh_error: str | None = None
        self._state_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        _LIVE.add(self)

    # -- the lease the report pipeline uses ------------------------------------------------
    def acquire(self) -> Lease:
        return self.registry.acquire(SLOT_NAME)

    # -- start-up and refresh -------------------------------------------------------------
    def start(self, *, background: bool = True) -> ReportRenderService:
        """Insert the default, apply the selection, then refresh in the background.

        Database errors propagate (start-up error); a broken release does not.
        """
        with transaction() as conn:
            sel.ensure_default_selection(conn)
            stored = self._read(conn)
        if stored is not None:
            self._apply(stored)
        if background:
            self._thread = threading.Thread(
                target=self._loop, name="report-render-refresh", daemon=True
            )
            self._thread.start()
        return self

    def _read(self, conn: Any) -> sel.Selection | None:
        try:
            return sel.read_selection(conn)
        except sel.SelectionInvalid as exc:
            self._record_error(f"selection: {exc}")
            return None

    def _loop(self) -> None:
        interval = self.settings.report_renderer.refresh_seconds
        while not self._stop.wait(interval):
            try:
                self.refresh_once()
            except Exception as exc:  # noqa: BLE001 - the loop must outlive any one failure
                self._record_error(f"{type(exc).__name__}: {exc}")

    def refresh_once(self) -> None:
        """Read the stored selection and apply it if it is newer or the applied one is broken."""
        try:
            with transaction() as conn:
                stored = self._read(conn)
        except ApiError as exc:
            self._record_error(f"database: {exc.message}")
            return
        except Exception as exc:  # noqa: BLE001 - e.g. a dropped database; keep retrying
            self._record_error(f"database: {type(exc).__name__}")
            return
        if stored is not None:
            self._apply(stored)
        self._apply_close_request()

    def _apply_close_request(self) -> None:
        """MOD-2: an admin's explicit close, applied to this process's stuck generations."""
        if not any(d["stuck"] for d in self.registry.draining_state()):
            return
        with transaction() as conn:
            request = sel.read_close_request(conn)
        if request is None:
            return
        through, by = request
        closed = self.registry.close_stuck(
            SLOT_NAME, through_revision=through, by=f"admin:{by}" if by else "admin"
        )
        if closed:
            emit("ModuleGenerationCloseApplied", generations=closed, through_revision=through)

    def request_close(self, *, through_revision: int, actor_user_id: int | None) -> dict[str, Any]:
        """Store the close request (every process applies it on its next refresh) and
        apply it here at once."""
        with transaction() as conn:
            stored = self._read(conn)
            current = stored.revision if stored is not None else 0
            if through_revision > current:
                # No generation has that revision yet: the request would lie in wait for
                # generations not made (and stored any number, however large).
                raise ValidationError(
                    "invalid close request",
                    code="invalid_request",
                    details={
                        "fields": {
                            "throughRevision": f"must be at most the current revision, {current}"
                        }
                    },
                )
            revision = sel.request_close(
                conn, through_revision=through_revision, actor_user_id=actor_user_id
            )
            record_audit(
                conn,
                actor_user_id=actor_user_id,
                action="module.close_stuck",
                target_type="module",
                target_id=SLOT_NAME,
                details={"through_revision": through_revision, "request_revision": revision},
            )
        closed = self.registry.close_stuck(
            SLOT_NAME,
            through_revision=through_revision,
            by=f"admin:{actor_user_id}" if actor_user_id else "admin",
        )
        emit(
            "ModuleGenerationCloseRequested",
            through_revision=through_revision,
            request_revision=revision,
            closed_here=closed,
        )
        return {
            "throughRevision": through_revision,
            "requestRevision": revision,
            "closedHere": closed,
        }

    def _needs(self, stored: sel.Selection) -> bool:
        # Checked before starting a worker that install() would refuse anyway.
        return self.registry.accepts(SLOT_NAME, stored.revision)

    def _apply(self, stored: sel.Selection) -> None:
        if self._closed or not self._needs(stored):
            self._record_ok()
            return
        try:
            module = open_candidate(self.settings, stored.release_id)
        except CandidateRejected as exc:
            self._record_error(f"release {exc.release_id}: {exc.reason}")
            emit(
                "ReportRendererActivationFailed",
                level=logging.ERROR,
                release_id=stored.release_id,
                revision=stored.revision,
                reason=exc.reason,
            )
            return
        try:
            self.registry.install(
                SLOT_NAME, module, release_id=stored.release_id, revision=stored.revision
            )
        except StaleRevision:
            module.shutdown(timeout=1.0)
        self._record_ok()

    def _record_error(self, message: str) -> None:
        with self._state_lock:
            changed = message != self.last_refresh_error
            self.last_refresh_error = message
        if changed:
            emit("ReportRendererRefreshFailed", level=logging.WARNING, error=message[:300])

    def _record_ok(self) -> None:
        with self._state_lock:
            self.last_refresh_error = None

    # -- publish (admin) -------------------------------------------------------------------
    def publish(
        self,
        *,
        expected_revision: int,
        release_id: str,
        change_reason: str,
        actor_user_id: int | None,
    ) -> PublishResult:
        try:
            module = open_candidate(self.settings, release_id)
        except CandidateRejected as exc:
            raise ValidationError(
                f"release {exc.release_id!r} cannot be published: {exc.reason}",
                code="invalid_release",
                details={"releaseId": exc.release_id, "reason": exc.reason},
            ) from None
        try:
            with transaction() as conn:
                revision = sel.publish_selection(
                    conn,
                    expected_revision=expected_revision,
                    release_id=release_id,
                    change_reason=change_reason,
                    actor_user_id=actor_user_id,
                )
        except ApiError:  # Conflict included
            module.shutdown(timeout=1.0)
            raise
        except Exception as exc:  # noqa: BLE001 - any database failure: nothing was written
            module.shutdown(timeout=1.0)
            emit(
                "ReportRendererPublishDatabaseError", level=logging.ERROR, error=type(exc).__name__
            )
            raise Unavailable(
                "the selection could not be saved; nothing changed",
                code="database_unavailable",
                retry_after=5,
            ) from None
        emit("ReportRendererPublished", release_id=release_id, revision=revision)
        audit = {
            "release_id": release_id,
            "revision": revision,
            "expected_revision": expected_revision,
            "change_reason": change_reason,
        }
        activated = False
        try:
            result = self._activate(module, release_id, revision)
            activated = True
            return result
        finally:
            # The selection is saved whatever happened here: every instance applies it.
            self._audit_publish(actor_user_id, {**audit, "pending_activation": not activated})

    def _activate(self, module: Any, release_id: str, revision: int) -> PublishResult:
        """Switch this process to the saved revision ``revision`` of ``release_id``."""
        if not confirm_alive(module):
            module.shutdown(timeout=1.0)
            self._record_error(f"release {release_id}: candidate died before activation")
            raise PendingActivation(revision, "the prepared worker stopped before the switch")
        try:
            generation = self.registry.install(
                SLOT_NAME, module, release_id=release_id, revision=revision
            )
        except StaleRevision:
            # A newer revision was applied meanwhile (another admin was faster): ours is history.
            module.shutdown(timeout=1.0)
            current = self.registry.current(SLOT_NAME)
            if current is None:
                raise PendingActivation(revision, "this instance is shutting down") from None
            return PublishResult(revision, release_id, current.identity)
        self._record_ok()
        return PublishResult(revision, release_id, generation.identity)

    def _audit_publish(self, actor_user_id: int | None, details: dict[str, Any]) -> None:
        """The ``module.publish`` audit row (IDN-6), in its own transaction after the save.

        A failure is logged, not raised: the publish already happened, and answering
        an error would make the admin resend with a stale revision. The selection's
        history row (actor, reason, revision) still records the change.
        """
        try:
            with transaction() as conn:
                record_audit(
                    conn,
                    actor_user_id=actor_user_id,
                    action="module.publish",
                    target_type="module",
                    target_id=SLOT_NAME,
                    details=details,
                )
        except Exception as exc:  # noqa: BLE001 - any database failure: the publish stands
            emit(
                "ReportRendererPublishAuditFailed",
                level=logging.ERROR,
                release_id=details["release_id"],
                revision=details["revision"],
                error=type(exc).__name__,
            )

    # -- status (admin) --------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Desired selection from the database (fresh), applied state from this process."""
        with transaction() as conn:
            try:
                stored: sel.Selection | None = sel.read_selection(conn)
            except sel.SelectionInvalid:
                stored = None
        return self.status_for(stored)

    def status_for(self, stored: sel.Selection | None) -> dict[str, Any]:
        generation = self.registry.current(SLOT_NAME)
        # Identity, revision and health come from this one generation handle.
        identity = generation.identity if generation is not None else None
        available = generation.available() if generation is not None else False
        with self._state_lock:
            error = self.last_refresh_error
        desired_revision = stored.revision if stored else None
        applied_revision = identity.revision if identity else None
        return {
            "desired": {
                "release_id": stored.release_id if stored else None,
                "revision": desired_revision,
            },
            "applied": {
                "release_id": identity.release_id if identity else None,
                "revision": applied_revision,
                "generation": identity.generation if identity else None,
            },
            "available": available,
            "synced": error is None and applied_revision == desired_revision,
            "converged": available
            and applied_revision is not None
            and applied_revision == desired_revision,
            "lastRefreshError": error,
            # Draining generations of this process; "stuck": work held past the drain
            # timeout (an admin may close them: POST .../report-render/close-stuck).
            "draining": self.registry.draining_state(),
        }

    # -- shutdown --------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Stop refreshing, drain and close every generation (worker processes reaped)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        self.registry.close(timeout)
        _LIVE.discard(self)
        emit("ReportRendererClosed")


_LIVE: weakref.WeakSet[ReportRenderService] = weakref.WeakSet()


def recent_selection_revisions(*, limit: int = 10) -> list[dict[str, Any]]:
    """The newest published renderer revisions, newest first (the console's rollback list)."""
    with transaction() as conn:
        return sel.recent_revisions(conn, limit=limit)


def close_all_services() -> None:
    """Exit hooks (gunicorn ``worker_exit``, atexit): no worker process outlives its host."""
    for service in list(_LIVE):
        try:
            service.close()
        except Exception as exc:  # noqa: BLE001 - keep closing the others
            emit("ReportRendererCloseFailed", level=logging.ERROR, error=type(exc).__name__)


atexit.register(close_all_services)
