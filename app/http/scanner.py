"""Scanner protocol routes (bearer token): claim, lease renewal, failure (SCN-3).

Uploads live in the result-ingest blueprint; these routes only move executions
through their lease life cycle.
"""

from __future__ import annotations

from flask import Blueprint, jsonify, request

from app.errors import ValidationError
from app.http import context
from app.http.guards import current_scanner, require_scanner
from app.http.requests import json_body
from app.identity.scanners import parse_agent_report
from app.json_input import checked_object
from app.observability import emit
from app.scan_control import scanner_calls
from app.scan_control.dispatch import EXECUTION_KINDS, parse_claim_token

blueprint = Blueprint("scanner", __name__, url_prefix="/api/scanner")


def _lease_seconds() -> int:
    return context.settings().scan.execution_lease_seconds


@blueprint.post("/claim")
@require_scanner
def claim():
    kinds = EXECUTION_KINDS
    report = None
    if request.content_length:
        # Unknown fields are refused, as in uploads and the agent report: a misspelt
        # "kind" would otherwise claim any kind of work.
        body = checked_object(json_body(), ("agent", "kinds"))
        report = parse_agent_report(body.get("agent"))
        if "kinds" in body:  # null is no list either: never "any kind" by accident
            requested = body["kinds"]
            if (
                not isinstance(requested, list)
                or not requested
                or any(k not in EXECUTION_KINDS for k in requested)
            ):
                raise ValidationError(
                    "kinds must be a non-empty list of 'ports'/'dns'",
                    code="invalid_kinds",
                    details={"field": "kinds"},
                )
            kinds = tuple(requested)
    scanner = current_scanner()
    # What the agent says about itself is kept in the claim's transaction (docs/
    # scanner-protocol.md, "Scanner status"); unchanged values write nothing.
    claimed = scanner_calls.claim(scanner.id, report, kinds=kinds, lease_seconds=_lease_seconds())
    if claimed is None:
        return "", 204
    emit(
        "ExecutionClaimed", execution_id=claimed.id, task_id=claimed.task_id, scanner_id=scanner.id
    )
    return jsonify({"execution": claimed.public()})


@blueprint.post("/executions/<int:execution_id>/lease")
@require_scanner
def renew_lease(execution_id: int):
    body = checked_object(json_body(), ("claim_token", "agent"))
    token = parse_claim_token(body.get("claim_token"))
    report = parse_agent_report(body.get("agent"))
    expires = scanner_calls.renew(
        current_scanner().id,
        report,
        execution_id=execution_id,
        claim_token=token,
        lease_seconds=_lease_seconds(),
    )
    return jsonify({"lease_expires_at": expires.isoformat()})


@blueprint.post("/executions/<int:execution_id>/fail")
@require_scanner
def fail(execution_id: int):
    body = checked_object(json_body(), ("claim_token", "reason"))
    token = parse_claim_token(body.get("claim_token"))
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ValidationError("reason must be a string", code="invalid_reason")
    failed_now = scanner_calls.fail(
        current_scanner().id,
        execution_id=execution_id,
        claim_token=token,
        reason=reason or "failed by scanner",
    )
    if failed_now:  # a repeated call changes nothing and tells nothing new
        emit("ExecutionFailedByScanner", execution_id=execution_id, scanner_id=current_scanner().id)
    return jsonify({"success": True})
