"""Change alerts (docs/alerts.md): rules, channels (with a test send), the delivery log."""

from __future__ import annotations

from typing import Any

from app.http.openapi.components import (
    CURSOR,
    LIMIT_1000,
    body,
    json_response,
    obj,
    operation,
    page,
    path_id,
    query,
)

_TEXT = {"type": "string"}
_TIME = {"type": "string", "format": "date-time"}
_MAYBE_TIME = {"type": ["string", "null"], "format": "date-time"}
_TEXTS = {"type": "array", "items": _TEXT}
_IDS = {"type": "array", "items": {"type": "integer"}}
# Change kinds, then the condition kinds the periodic jobs evaluate (docs/alerts.md).
_KINDS = [
    "new",
    "gone",
    "reappeared",
    "changed",
    "scanner_offline",
    "certificate_expires",
    "run_failed",
]
_DAYS = {
    "type": ["integer", "null"],
    "minimum": 1,
    "maximum": 3650,
    "description": "certificate_expires: how many days before not_after (required with it, "
    "refused without it)",
}
_BACK_ONLINE = {
    "type": "boolean",
    "description": "scanner_offline: also tell when the scanner is back online (true is "
    "refused without it)",
}

_FILTER = {
    "type": "object",
    "properties": {
        "cidrs": _TEXTS,
        "ports": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 65535}},
        "services": _TEXTS,
        "products": _TEXTS,
        "tasks": _IDS,
        "tags": _TEXTS,
        "search": {
            "type": ["integer", "null"],
            "description": "one of your saved searches; the changed endpoint's current asset "
            "must match it (read when a change set is evaluated; not with query)",
        },
        "query": {
            "type": ["string", "null"],
            "maxLength": 1000,
            "description": "a search-language query of the rule's own (not with search); "
            "the changed endpoint's current asset must match it",
        },
    },
}

_RULE_FIELDS: dict[str, Any] = {
    "name": _TEXT,
    "on": {"type": "array", "items": {"type": "string", "enum": _KINDS}},
    "fields": {**_TEXTS, "description": "changed: only these fields (refused without it)"},
    "filter": _FILTER,
    "channels": _IDS,
    "mode": {"type": "string", "enum": ["each", "digest"]},
    "enabled": {"type": "boolean"},
    "global": {"type": "boolean", "description": "admins only: a rule over every owner"},
    "days": _DAYS,
    "back_online": _BACK_ONLINE,
}

RULE = obj(
    {
        "id": {"type": "integer"},
        "owner_id": {"type": "integer"},
        "global": {"type": "boolean"},
        "name": _TEXT,
        "on": _TEXTS,
        "fields": _TEXTS,
        "filter": _FILTER,
        "channels": _IDS,
        "mode": {"type": "string", "enum": ["each", "digest"]},
        "enabled": {"type": "boolean"},
        "created_at": _TIME,
        "updated_at": _TIME,
    },
    {"days": _DAYS, "back_online": _BACK_ONLINE},
)

CHANNEL = obj(
    {
        "id": {"type": "integer"},
        "owner_id": {"type": "integer"},
        "name": _TEXT,
        "kind": {"type": "string", "enum": ["webhook", "email", "apprise"]},
        "created_at": _TIME,
    },
    {
        "url": _TEXT,
        "previous_secret_until": _MAYBE_TIME,
        "recipients": _TEXTS,
        "secret": {"type": "string", "description": "a webhook's signing secret, shown once"},
    },
)

DELIVERY = obj(
    {
        "id": _TEXT,
        "rule_id": {"type": ["integer", "null"]},
        "channel_id": {"type": ["integer", "null"]},
        "channel_kind": {
            "type": ["string", "null"],
            "description": "null once the channel is deleted",
        },
        "execution_id": {"type": ["integer", "null"]},
        "task_id": {"type": ["integer", "null"]},
        "run_id": {"type": ["integer", "null"], "description": "the run the message is about"},
        "message_kind": _TEXT,
        "event_type": _TEXT,
        "status": {"type": "string", "enum": ["pending", "delivered", "dead"]},
        "attempts": {"type": "integer"},
        "last_error": {"type": ["string", "null"]},
        "created_at": _MAYBE_TIME,
        "first_attempt_at": _MAYBE_TIME,
        "delivered_at": _MAYBE_TIME,
        "next_attempt_at": _MAYBE_TIME,
    }
)

_DELIVERY_ID = {"name": "delivery_id", "in": "path", "required": True, "schema": _TEXT}


OPERATIONS = {
    ("post", "/api/alerts/rules"): operation(
        "alerts",
        "Create an alert rule",
        {"201": json_response("the rule", obj({"rule": RULE}))},
        requestBody=body(
            obj(
                {"name": _TEXT, "on": _RULE_FIELDS["on"], "channels": _RULE_FIELDS["channels"]},
                _RULE_FIELDS,
            )
        ),
    ),
    ("get", "/api/alerts/rules"): operation(
        "alerts",
        "Your alert rules (and the global ones)",
        {"200": json_response("the rules", obj({"items": {"type": "array", "items": RULE}}))},
    ),
    ("get", "/api/alerts/rules/{rule_id}"): operation(
        "alerts",
        "One alert rule",
        {"200": json_response("the rule", obj({"rule": RULE}))},
        parameters=[path_id("rule_id")],
    ),
    ("patch", "/api/alerts/rules/{rule_id}"): operation(
        "alerts",
        "Change an alert rule (the fields given)",
        {"200": json_response("the rule", obj({"rule": RULE}))},
        parameters=[path_id("rule_id")],
        requestBody=body({"type": "object", "properties": _RULE_FIELDS}),
    ),
    ("delete", "/api/alerts/rules/{rule_id}"): operation(
        "alerts",
        "Delete an alert rule",
        {"204": {"description": "deleted"}},
        parameters=[path_id("rule_id")],
    ),
    ("post", "/api/alerts/channels"): operation(
        "alerts",
        "Create a channel (a webhook's secret is in this answer only)",
        {"201": json_response("the channel", obj({"channel": CHANNEL}))},
        requestBody=body(
            obj(
                {"kind": CHANNEL["properties"]["kind"]},
                {"name": _TEXT, "url": _TEXT, "recipients": _TEXTS},
            )
        ),
    ),
    ("get", "/api/alerts/channels"): operation(
        "alerts",
        "Your channels (never a secret or an Apprise URL)",
        {"200": json_response("the channels", obj({"items": {"type": "array", "items": CHANNEL}}))},
    ),
    ("get", "/api/alerts/channels/{channel_id}"): operation(
        "alerts",
        "One channel",
        {"200": json_response("the channel", obj({"channel": CHANNEL}))},
        parameters=[path_id("channel_id")],
    ),
    ("delete", "/api/alerts/channels/{channel_id}"): operation(
        "alerts",
        "Delete a channel",
        {"204": {"description": "deleted"}},
        parameters=[path_id("channel_id")],
    ),
    ("post", "/api/alerts/channels/{channel_id}/rotate-secret"): operation(
        "alerts",
        "A new webhook secret (shown once); the old one signs too until previous_secret_until",
        {"200": json_response("the channel with its new secret", obj({"channel": CHANNEL}))},
        parameters=[path_id("channel_id")],
    ),
    ("post", "/api/alerts/channels/{channel_id}/test"): operation(
        "alerts",
        "Send a test message now and report the outcome (not queued, not retried)",
        {
            "200": json_response(
                "the outcome",
                obj(
                    {"ok": {"type": "boolean"}, "id": _TEXT},
                    {"result": {}, "error": _TEXT},
                ),
            )
        },
        parameters=[path_id("channel_id")],
    ),
    ("get", "/api/alerts/deliveries"): operation(
        "alerts",
        "The delivery log, newest first",
        {"200": json_response("a page of deliveries", page(DELIVERY))},
        parameters=[
            LIMIT_1000,
            CURSOR,
            query("rule", {"type": "integer", "minimum": 1}, "only this rule's messages"),
            query(
                "status",
                {"type": "string", "enum": ["pending", "delivered", "dead"]},
                "only messages in this status",
            ),
        ],
    ),
    ("get", "/api/alerts/deliveries/{delivery_id}"): operation(
        "alerts",
        "One delivery",
        {"200": json_response("the delivery", obj({"delivery": DELIVERY}))},
        parameters=[_DELIVERY_ID],
    ),
    ("post", "/api/alerts/deliveries/{delivery_id}/redeliver"): operation(
        "alerts",
        "Send a message again (same id, fresh retry window)",
        {"200": json_response("the delivery", obj({"delivery": DELIVERY}))},
        parameters=[_DELIVERY_ID],
    ),
}
