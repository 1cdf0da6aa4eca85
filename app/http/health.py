"""Liveness, readiness and metrics endpoints.

``/healthz`` and ``/readyz`` are public (load balancers call them); ``/readyz``
names the schema revisions only to a logged-in admin, since the exact version
helps an attacker more than a balancer. ``/metrics`` is for operators: a
scraper sends ``Authorization: Bearer <[security] metrics_token>``, a person
uses an admin session (OBS-3).
"""

from __future__ import annotations

import hmac

from flask import Blueprint, Response, jsonify

from app.errors import ApiError
from app.http.context import settings
from app.http.guards import optional_admin, public, require_admin_or_bearer
from app.migrations import database_revisions, head_revisions
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
        current = database_revisions()
    except ApiError as exc:
        return jsonify({"status": "unavailable", "reason": exc.code}), 503
    heads = head_revisions()
    if current != heads:
        body = {"status": "unavailable", "reason": "migrations_pending"}
        if optional_admin():
            body.update(current=sorted(current), head=sorted(heads))
        return jsonify(body), 503
    body = {"status": "ready"}
    if optional_admin():
        body["revision"] = sorted(current)
    return jsonify(body)


def _is_metrics_token(token: str) -> bool:
    expected = settings().security.metrics_token
    return bool(expected) and hmac.compare_digest(expected.encode(), token.encode())


@blueprint.get("/metrics")
@require_admin_or_bearer(_is_metrics_token, realm="netmap-metrics")
def metrics():
    # The whole header as Prometheus expects it, once: ``mimetype`` would have Flask add a
    # second charset, and Prometheus 3 refuses a Content-Type with a repeated parameter.
    return Response(render_metrics(), content_type="text/plain; version=0.0.4; charset=utf-8")
