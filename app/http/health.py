"""Liveness, readiness and metrics endpoints."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from app.db import transaction
from app.errors import ApiError
from app.http.guards import public
from app.migrations import current_revisions, head_revisions
from app.observability import render_metrics

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
@public
def healthz():
    return jsonify({"status": "ok"})


@blueprint.get("/readyz")
@public
def readyz():
    try:
        with transaction() as conn:
            current = current_revisions(conn)
    except ApiError as exc:
        return jsonify({"status": "unavailable", "reason": exc.code}), 503
    heads = head_revisions()
    if current != heads:
        return (
            jsonify(
                {
                    "status": "unavailable",
                    "reason": "migrations_pending",
                    "current": sorted(current),
                    "head": sorted(heads),
                }
            ),
            503,
        )
    return jsonify({"status": "ready", "revision": sorted(current)})


@blueprint.get("/metrics")
@public
def metrics():
    return Response(render_metrics(), mimetype="text/plain; version=0.0.4; charset=utf-8")
