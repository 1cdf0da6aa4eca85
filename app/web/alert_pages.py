"""The alerts page: one's rules, channels (with a test button) and the delivery log.

Reads go through the same services as ``/api/alerts`` with the same scoping (a user
sees their own rules, channels and deliveries). "Test" sends a test message now and
shows the outcome; "Redeliver" queues a message again with its id. Both are POSTs
carrying the session's CSRF token. Rules and channels are created through the API
(docs/alerts.md): a channel's secret is shown once, in that answer.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.alerts import channels, deliveries, rules
from app.errors import ValidationError
from app.web import blueprint
from app.web.access import page_user, signed_in_user

PAGE_SIZE = 100


def _render(test_result: dict | None = None, status: int = 200):
    user = signed_in_user()
    wanted = request.args.get("status") or None
    if wanted not in (None, *deliveries.STATUSES):
        raise ValidationError(
            "status must be one of " + ", ".join(deliveries.STATUSES),
            code="invalid_parameter",
            details={"parameter": "status"},
        )
    log = deliveries.list_deliveries(
        user, rule_id=None, status=wanted, limit=PAGE_SIZE, before=None
    )
    return (
        render_template(
            "console/alerts.html",
            rules=rules.list_rules(user),
            channels=channels.list_channels(user),
            deliveries=log,
            statuses=deliveries.STATUSES,
            wanted=wanted,
            test_result=test_result,
        ),
        status,
    )


@blueprint.get("/alerts")
@page_user
def alerts_page():
    return _render()


@blueprint.post("/alerts/channels/<int:channel_id>/test")
@page_user
def alerts_channel_test(channel_id: int):
    from app.http.alerts import test_send

    result = test_send(channel_id)
    return _render({"channel_id": channel_id, **result})


@blueprint.post("/alerts/deliveries/<delivery_id>/redeliver")
@page_user
def alerts_redeliver(delivery_id: str):
    deliveries.redeliver(signed_in_user(), delivery_id)
    return redirect(url_for("web.alerts_page"), code=303)
