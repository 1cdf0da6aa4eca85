"""Admin routes for the report renderer module (MOD-8): status and publish/rollback.

Both need an admin session (CSRF for POST) and fall under the admin rate
limit. Publishing takes only a release id: paths, commands and uploads are
never accepted over HTTP.
"""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.errors import Unavailable, ValidationError
from app.http import context
from app.http.guards import current_user, require_admin
from app.http.requests import json_body
from app.json_input import checked_object, has_control_characters
from app.modules.selection import Selection
from app.modules.service import MAX_CHANGE_REASON, ReportRenderService

blueprint = Blueprint("modules", __name__, url_prefix="/api/modules")


def _service() -> ReportRenderService:
    service = context.report_renderer()
    if service is None:
        raise Unavailable(
            "the report renderer is not running in this process", code="module_unavailable"
        )
    return service


@blueprint.get("/report-render")
@require_admin
def report_render_status():
    return jsonify(_service().status())


@blueprint.post("/report-render")
@require_admin
def report_render_publish():
    body = json_body()
    # A misspelt field must not publish a release with the field's intent lost.
    checked_object(body, {"expectedRevision", "releaseId", "changeReason"})
    expected = body.get("expectedRevision")
    release_id = body.get("releaseId")
    reason = body.get("changeReason")
    problems = {}
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 1:
        problems["expectedRevision"] = "must be a positive integer (read it with GET first)"
    if not isinstance(release_id, str) or not release_id:
        problems["releaseId"] = "must be a release id or 'builtin'"
    if (
        not isinstance(reason, str)
        or not reason.strip()
        or len(reason) > MAX_CHANGE_REASON
        or has_control_characters(reason)
    ):
        problems["changeReason"] = (
            f"must be one line of text of at most {MAX_CHANGE_REASON} characters"
        )
    if problems:
        raise ValidationError(
            "invalid publish request", code="invalid_request", details={"fields": problems}
        )
    service = _service()
    result = service.publish(
        expected_revision=expected,
        release_id=release_id,
        change_reason=reason.strip(),
        actor_user_id=current_user().id,
    )
    # The desired state is the one just written; no second read that could fail after success.
    status = service.status_for(Selection(result.release_id, result.revision))
    status["revision"] = result.revision
    status["releaseId"] = result.release_id
    return jsonify(status)


@blueprint.post("/report-render/close-stuck")
@require_admin
def report_render_close_stuck():
    """MOD-2: close, by force, the stuck draining generations up to a revision.

    Stored for every process (each applies it on its next refresh) and applied in
    this one at once; a generation that is draining normally is never touched."""
    body = checked_object(json_body(), {"throughRevision"})
    through = body.get("throughRevision")
    if not isinstance(through, int) or isinstance(through, bool) or through < 1:
        raise ValidationError(
            "invalid close request",
            code="invalid_request",
            details={"fields": {"throughRevision": "must be a positive integer"}},
        )
    result = _service().request_close(through_revision=through, actor_user_id=current_user().id)
    return jsonify(result), 202
