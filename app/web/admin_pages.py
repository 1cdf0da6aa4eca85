"""Admin pages: users and the report renderer's publish/rollback (WEB-6).

They call the same audited identity and module services as the admin API (the
scanners' page is ``scanner_pages``). Publishing the renderer is optimistic like
the API: the form carries the revision the admin saw, and when someone else
published in between the page says so, shows the current state and lets them
decide again.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.errors import ApiError, Conflict
from app.http import context
from app.http.admin import audit_page_from
from app.http.requests import encode_cursor, int_arg
from app.identity import service as identity
from app.modules.selection import Selection
from app.modules.service import MAX_CHANGE_REASON, recent_selection_revisions
from app.web import blueprint, error_message
from app.web.access import page_admin, signed_in_user

PAGE_SIZE = 100


# -- users ------------------------------------------------------------------------------
def _users_page(*, created=None, error=None, form=None, status=200):
    """The Users page; a refused new user shows it again with the message and what was
    typed (``form``: username and the admin box; never the password)."""
    after = int_arg("after", minimum=0)
    items = identity.list_users(limit=PAGE_SIZE + 1, after_id=after)
    next_url = (
        url_for("web.users", after=items[PAGE_SIZE - 1].id) if len(items) > PAGE_SIZE else None
    )
    body = render_template(
        "console/users.html",
        items=items[:PAGE_SIZE],
        created=created,
        error=error,
        form=form or {"username": "", "is_admin": False},
        next_url=next_url,
    )
    return body, status


@blueprint.route("/users", methods=["GET", "POST"])
@page_admin
def users():
    if request.method == "GET":
        return _users_page()
    try:
        user = identity.create_user(
            request.form.get("username", ""),
            request.form.get("password", ""),
            is_admin=request.form.get("is_admin") == "on",
            actor_user_id=signed_in_user().id,
            via="console",
        )
    except ApiError as refused:
        typed = {
            "username": request.form.get("username", ""),
            "is_admin": request.form.get("is_admin") == "on",
        }
        return _users_page(error=error_message(refused), form=typed, status=refused.status)
    return _users_page(created=user, status=201)


@blueprint.post("/users/<int:user_id>/<any(disable, enable):action>")
@page_admin
def user_set_disabled(user_id: int, action: str):
    identity.set_user_disabled(user_id, action == "disable", actor=signed_in_user(), via="console")
    return redirect(url_for("web.users"), code=303)


# -- audit trail ------------------------------------------------------------------------
@blueprint.get("/admin/audit")
@page_admin
def audit():
    """The audit trail, newest first, narrowed by action (or family) and actor, as
    ``GET /api/audit`` gives it."""
    filters = {name: request.args.get(name, "") for name in ("action", "actor")}
    items: list = []
    next_url = error = None
    try:
        items, next_id = audit_page_from(limit=PAGE_SIZE)
    except ApiError as refused:
        error = refused.message
    else:
        if next_id is not None:
            kept = {k: v for k, v in filters.items() if v}
            next_url = url_for(
                "web.audit",
                cursor=encode_cursor({"before": next_id}, endpoint="web.audit"),
                **kept,
            )
    body = render_template(
        "console/audit.html", items=items, filters=filters, error=error, next_url=next_url
    )
    return body, 400 if error else 200


# -- report renderer --------------------------------------------------------------------
def _renderer_page(*, notice=None, error=None, conflict=None, form=None, status=200):
    service = context.report_renderer()
    state = service.status() if service is not None else None
    history = recent_selection_revisions(limit=10)
    body = render_template(
        "console/renderer.html",
        state=state,
        history=history,
        notice=notice,
        error=error,
        conflict=conflict,
        form=form or {},
        max_reason=MAX_CHANGE_REASON,
    )
    return body, status


@blueprint.route("/admin/renderer", methods=["GET", "POST"])
@page_admin
def renderer():
    if request.method == "GET":
        return _renderer_page()
    form = {
        "release_id": request.form.get("release_id", "").strip(),
        "change_reason": request.form.get("change_reason", "").strip(),
        "expected_revision": request.form.get("expected_revision", ""),
    }
    service = context.report_renderer()
    if service is None:
        return _renderer_page(error="The report renderer is not running here.", status=503)
    problems = []
    try:
        expected = int(form["expected_revision"])
    except ValueError:
        expected = 0
    if expected < 1:
        problems.append("the page did not carry the revision you saw; reload it")
    if not form["release_id"]:
        problems.append("release id: give a release id or 'builtin'")
    if not form["change_reason"] or len(form["change_reason"]) > MAX_CHANGE_REASON:
        problems.append(f"reason: 1-{MAX_CHANGE_REASON} characters")
    if problems:
        return _renderer_page(error="; ".join(problems), form=form, status=400)
    try:
        result = service.publish(
            expected_revision=expected,
            release_id=form["release_id"],
            change_reason=form["change_reason"],
            actor_user_id=signed_in_user().id,
        )
    except Conflict as conflict:
        details = conflict.details or {}
        return _renderer_page(
            conflict={
                "expected": details.get("expectedRevision", expected),
                "current": details.get("currentRevision"),
            },
            form=form,
            status=409,
        )
    except ApiError as refused:
        return _renderer_page(error=refused.message, form=form, status=refused.status)
    applied = service.status_for(Selection(result.release_id, result.revision))
    notice = (
        f"Published {result.release_id} as revision {result.revision}"
        f"{'' if applied.get('converged') else ' (activation pending on this instance)'}."
    )
    return _renderer_page(notice=notice)
