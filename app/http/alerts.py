"""Alerts API (docs/alerts.md): rules, channels (with a test send), the delivery log.

Routes only translate: the services in ``app.alerts`` open the transactions. A test
send happens in the request (bounded by the outbound timeouts) with no database
connection held, and answers with its outcome; it is not queued or retried.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from flask import Blueprint, jsonify, request

from app.alerts import channels, deliveries, rules
from app.alerts.outbound import PermanentDeliveryError, TemporaryDeliveryError
from app.alerts.senders import Message, send
from app.http import context
from app.http.guards import current_user, require_user
from app.http.requests import decode_cursor, encode_cursor, int_arg, json_body, page_limit

blueprint = Blueprint("alerts", __name__, url_prefix="/api/alerts")


@blueprint.post("/rules")
@require_user
def create_rule_route():
    rule = rules.create_rule(current_user(), json_body(), store=context.store())
    return jsonify({"rule": rule}), 201


@blueprint.get("/rules")
@require_user
def list_rules_route():
    return jsonify({"items": rules.list_rules(current_user())})


@blueprint.get("/rules/<int:rule_id>")
@require_user
def get_rule_route(rule_id: int):
    return jsonify({"rule": rules.get_rule(current_user(), rule_id)})


@blueprint.patch("/rules/<int:rule_id>")
@require_user
def update_rule_route(rule_id: int):
    rule = rules.update_rule(current_user(), rule_id, json_body(), store=context.store())
    return jsonify({"rule": rule})


@blueprint.delete("/rules/<int:rule_id>")
@require_user
def delete_rule_route(rule_id: int):
    rules.delete_rule(current_user(), rule_id)
    return "", 204


@blueprint.post("/channels")
@require_user
def create_channel_route():
    channel = channels.create_channel(context.settings(), current_user(), json_body())
    return jsonify({"channel": channel}), 201


@blueprint.get("/channels")
@require_user
def list_channels_route():
    return jsonify({"items": channels.list_channels(current_user())})


@blueprint.get("/channels/<int:channel_id>")
@require_user
def get_channel_route(channel_id: int):
    return jsonify({"channel": channels.get_channel(current_user(), channel_id)})


@blueprint.delete("/channels/<int:channel_id>")
@require_user
def delete_channel_route(channel_id: int):
    channels.delete_channel(current_user(), channel_id)
    return "", 204


@blueprint.post("/channels/<int:channel_id>/rotate-secret")
@require_user
def rotate_secret_route(channel_id: int):
    channel = channels.rotate_secret(context.settings(), current_user(), channel_id)
    return jsonify({"channel": channel})


def test_send(channel_id: int) -> dict:
    """Send a test message through the caller's channel now; the outcome, never a secret."""
    channel = channels.load_channel(current_user(), channel_id)
    message = Message(
        id="msg_test_" + secrets.token_hex(12),
        event_type="netmap.test",
        created_at=datetime.now(UTC),
        payload={"channel": {"id": channel.id, "name": channel.name}},
    )
    try:
        note = send(context.settings(), channel, message)
    except (PermanentDeliveryError, TemporaryDeliveryError, OSError, ValueError) as exc:
        return {"ok": False, "id": message.id, "error": str(exc)[:500]}
    return {"ok": True, "id": message.id, "result": note}


@blueprint.post("/channels/<int:channel_id>/test")
@require_user
def test_channel_route(channel_id: int):
    return jsonify(test_send(channel_id))


@blueprint.get("/deliveries")
@require_user
def list_deliveries_route():
    limit = page_limit(default=100, maximum=1000)
    position = decode_cursor(kind="alert_deliveries")
    before = None
    if position is not None:
        before = (datetime.fromisoformat(position["at"]), str(position["id"]))
    items = deliveries.list_deliveries(
        current_user(),
        rule_id=int_arg("rule", minimum=1, maximum=2**63 - 1),
        status=request.args.get("status") or None,
        limit=limit,
        before=before,
    )
    cursor = None
    if len(items) == limit:
        last = items[-1]
        cursor = encode_cursor({"at": last["created_at"], "id": last["id"]}, "alert_deliveries")
    return jsonify({"items": items, "next_cursor": cursor})


@blueprint.get("/deliveries/<delivery_id>")
@require_user
def get_delivery_route(delivery_id: str):
    return jsonify({"delivery": deliveries.get_delivery(current_user(), delivery_id)})


@blueprint.post("/deliveries/<delivery_id>/redeliver")
@require_user
def redeliver_route(delivery_id: str):
    return jsonify({"delivery": deliveries.redeliver(current_user(), delivery_id)})
