"""Report routes (REP-1..6): definitions (owner), reports and their mail, templates (admin).

Thin: requests become ``app.reports`` calls. ``mail.html`` serves the archived
mail with its images inlined as ``data:`` URIs (read from the object store), so
the browser shows exactly what was sent without another route per image.
"""

from __future__ import annotations

import base64

from flask import Blueprint, Response, jsonify, request

from app.errors import NotFound, Unavailable, ValidationError
from app.http import context
from app.http.guards import current_user, require_admin, require_user
from app.http.requests import decode_cursor, encode_cursor, json_body, page_limit
from app.json_input import checked_object
from app.object_store.port import ObjectNotFound, ObjectStoreUnavailable
from app.reports import definitions, records, templates
from app.reports import service as reports

blueprint = Blueprint("reports", __name__)


@blueprint.post("/api/reports/definitions")
@require_user
def create_definition_route():
    return jsonify(
        {
            "definition": definitions.create_definition(
                current_user(),
                json_body(),
                max_recipients=context.settings().reports.max_recipients,
            )
        }
    ), 201


@blueprint.get("/api/reports/definitions")
@require_user
def list_definitions_route():
    return jsonify({"items": definitions.list_definitions(current_user())})


@blueprint.get("/api/reports/definitions/<int:definition_id>")
@require_user
def get_definition_route(definition_id: int):
    return jsonify({"definition": definitions.get_definition(current_user(), definition_id)})


@blueprint.route("/api/reports/definitions/<int:definition_id>", methods=["PUT", "PATCH"])
@require_user
def update_definition_route(definition_id: int):
    updated = definitions.update_definition(
        current_user(),
        definition_id,
        json_body(),
        max_recipients=context.settings().reports.max_recipients,
    )
    return jsonify({"definition": updated})


@blueprint.delete("/api/reports/definitions/<int:definition_id>")
@require_user
def delete_definition_route(definition_id: int):
    definitions.delete_definition(current_user(), definition_id)
    return jsonify({"deleted": definition_id})


@blueprint.post("/api/reports/definitions/<int:definition_id>/run")
@require_user
def run_definition_route(definition_id: int):
    # An optional body ``{"run": <run id>}`` shows that run of the definition's task.
    body = checked_object(json_body(), {"run"}) if request.content_length else {}
    run_id = body.get("run")
    if run_id is not None and (type(run_id) is not int or run_id < 1):
        raise ValidationError("run must be a run id", details={"field": "run"})
    report = definitions.run_now(
        current_user(),
        definition_id,
        cooldown_seconds=context.settings().reports.run_now_cooldown_seconds,
        run_id=run_id,
    )
    return jsonify({"report": report}), 202


@blueprint.get("/api/reports")
@require_user
def list_reports_route():
    limit = page_limit()
    cursor = decode_cursor()
    items, next_id = reports.list_reports(
        current_user().id, limit=limit, after_id=int(cursor["id"]) if cursor else None
    )
    return jsonify(
        {"items": items, "next_cursor": encode_cursor({"id": next_id}) if next_id else None}
    )


@blueprint.get("/api/reports/<int:report_id>")
@require_user
def get_report_route(report_id: int):
    row, deliveries = reports.visible_report(current_user(), report_id)
    return jsonify({"report": records.report_dict(row, deliveries)})


@blueprint.get("/api/reports/<int:report_id>/mail.html")
@require_user
def report_mail_route(report_id: int):
    row, _ = reports.visible_report(current_user(), report_id)
    if row.html is None:
        raise NotFound("this report has no archived mail", code="report_mail_not_found")
    html = row.html
    store = context.object_store()
    for image in row.images:
        try:
            with store.open(image["key"]) as handle:
                data = handle.read()
        except ObjectNotFound:
            # Gone from the store (a bucket emptied, a restore without it): the mail is
            # shown without it rather than not at all (it was a 500).
            data = None
        except ObjectStoreUnavailable:
            raise Unavailable(
                "the object store holding the report's images cannot be reached; try again",
                code="object_store_unavailable",
                retry_after=30,
            ) from None
        source = "" if data is None else f"data:image/png;base64,{base64.b64encode(data).decode()}"
        html = html.replace(f"cid:{image['token']}", source)
    return Response(
        html,
        mimetype="text/html",
        headers={
            # Archived template output: no scripts, images only from data: URIs.
            "Content-Security-Policy": (
                "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
            ),
            "Cache-Control": "private, no-store",
        },
    )


@blueprint.post("/api/reports/<int:report_id>/retry")
@require_admin
def retry_report_route(report_id: int):
    # A failed report is generated again; a ready one sends its failed deliveries again.
    reports.retry_report(report_id)
    row, deliveries = reports.visible_report(current_user(), report_id)
    return jsonify({"report": records.report_dict(row, deliveries)}), 202


@blueprint.get("/api/reports/templates")
@require_admin
def list_templates_route():
    return jsonify({"items": reports.list_templates()})


@blueprint.post("/api/reports/templates")
@require_admin
def add_template_route():
    body = templates.validate_template_version(json_body())
    reports.add_template_version(body, user_id=current_user().id)
    return jsonify({"template": {"name": body["name"], "version": body["version"]}}), 201


@blueprint.post("/api/reports/templates/<name>/publish")
@require_admin
def publish_template_route(name: str):
    body = checked_object(json_body(), {"version"})
    reports.publish_template_version(name, body.get("version"), user_id=current_user().id)
    return jsonify({"template": {"name": name, "published_version": body.get("version")}})
