"""The alerts page: one's rules, channels (with a test button) and the delivery log.

Reads go through the same services as ``/api/alerts`` with the same scoping (a user
sees their own rules, channels and deliveries). "Test" sends a test message now and
shows the outcome; "Redeliver" queues a message again with its id. Both are POSTs
carrying the session's CSRF token. A rule can be made here (name, change kinds and conditions,
channels, mode and a search filter: one of the user's saved searches or a query),
through the API's own validation (``rules.create_rule``), a refused field shown next to
it with the input kept; so can a channel (name, kind, and its webhook or Apprise URL or
its email recipients, ``channels.create_channel``): a webhook's signing secret is shown
once, on the page that answers the form, as in the API's answer. A rule can be disabled,
enabled again or deleted from its row (``rules.update_rule`` and ``rules.delete_rule``, as
``PATCH`` and ``DELETE /api/alerts/rules/<id>``), and a channel no rule sends to deleted
from its row (``channels.delete_channel``). Everything else about rules and channels
goes through the API (docs/alerts.md).
"""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for

from app.alerts import channels, deliveries, rules
from app.alerts.conditions import CONDITION_KINDS
from app.analysis.changes import CHANGE_KINDS
from app.errors import Conflict, NotFound, ValidationError
from app.http import context
from app.web import blueprint
from app.web.access import page_user, signed_in_user
from app.web.search_choices import form_id, saved_search_choices, search_reference

PAGE_SIZE = 100
EMPTY_RULE = {"name": "", "mode": "each", "search": "", "query": "", "days": ""}
# The condition kinds in the form's words (docs/alerts.md, "Condition rules").
CONDITION_WORDS = {
    "scanner_offline": "a scanner goes offline",
    "run_failed": "a run fails",
    "certificate_expires": "a certificate expires within",
}
EMPTY_CHANNEL = {"name": "", "kind": "email", "url": "", "recipients": ""}
# A refused field of the API (``details.field``) and the form field it is shown at.
_FORM_FIELD = {"filter.search": "search", "filter.query": "query"}


def _render(
    test_result: dict | None = None,
    status: int = 200,
    *,
    form: dict[str, Any] | None = None,
    field_errors: dict[str, str] | None = None,
    channel_form: dict[str, Any] | None = None,
    channel_errors: dict[str, str] | None = None,
    created_channel: dict[str, Any] | None = None,
    channel_refusal: str | None = None,
):
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
    own_channels = channels.list_channels(user)
    return (
        render_template(
            "console/alerts.html",
            rules=rules.list_rules(user),
            channels=own_channels,
            # A rule's channels by name; a global rule's may be another's: shown by number.
            channel_names={c["id"]: c["name"] for c in own_channels},
            deliveries=log,
            statuses=deliveries.STATUSES,
            wanted=wanted,
            test_result=test_result,
            form=form or {**EMPTY_RULE, "on": [], "channels": []},
            field_errors=field_errors or {},
            kinds=CHANGE_KINDS,
            conditions=[(k, CONDITION_WORDS[k]) for k in CONDITION_KINDS],
            modes=rules.MODES,
            searches=saved_search_choices(user.id),
            channel_form=channel_form or EMPTY_CHANNEL,
            channel_errors=channel_errors or {},
            channel_kinds=channels.KINDS,
            created_channel=created_channel,
            channel_refusal=channel_refusal,
        ),
        status,
        # A webhook's secret is on this page once: no cache keeps it.
        {"Cache-Control": "no-store"} if created_channel else {},
    )


@blueprint.post("/alerts/rules")
@page_user
def alerts_rule_create():
    form: dict[str, Any] = {k: request.form.get(k, d)[:4000] for k, d in EMPTY_RULE.items()}
    form["on"] = request.form.getlist("on")
    form["channels"] = request.form.getlist("channels")
    body: dict[str, Any] = {
        "name": form["name"],
        "on": form["on"],
        "channels": [form_id(c) for c in form["channels"]],
        "mode": form["mode"],
    }
    searched = search_reference(form)
    if searched is not None:
        body["filter"] = searched
    if form["days"].strip():
        try:
            body["days"] = int(form["days"])
        except ValueError:
            return _render(
                status=400, form=form, field_errors={"days": "days must be a whole number"}
            )
    if "scanner_offline" in form["on"] and request.form.get("back_online"):
        body["back_online"] = True
    try:
        rules.create_rule(signed_in_user(), body, store=context.store())
    except (ValidationError, NotFound) as refused:
        field = (refused.details or {}).get("field") or "form"
        field = _FORM_FIELD.get(field, field)
        return _render(status=400, form=form, field_errors={field: refused.message})
    return redirect(url_for("web.alerts_page"), code=303)


@blueprint.post("/alerts/rules/<int:rule_id>/<any(disable, enable):action>")
@page_user
def alerts_rule_switch(rule_id: int, action: str):
    rules.update_rule(
        signed_in_user(), rule_id, {"enabled": action == "enable"}, store=context.store()
    )
    return redirect(url_for("web.alerts_page"), code=303)


@blueprint.post("/alerts/rules/<int:rule_id>/delete")
@page_user
def alerts_rule_delete(rule_id: int):
    rules.delete_rule(signed_in_user(), rule_id)
    return redirect(url_for("web.alerts_page"), code=303)


@blueprint.post("/alerts/channels")
@page_user
def alerts_channel_create():
    form = {k: request.form.get(k, d)[:4000] for k, d in EMPTY_CHANNEL.items()}
    body: dict[str, Any] = {"kind": form["kind"]}
    if form["name"]:
        body["name"] = form["name"]  # without one, the channel is named after its kind
    if form["kind"] == "email":
        # One address a line, or several on a line separated by commas.
        body["recipients"] = [
            a.strip() for a in form["recipients"].replace(",", "\n").splitlines() if a.strip()
        ]
    else:
        body["url"] = form["url"].strip()
    try:
        created = channels.create_channel(context.settings(), signed_in_user(), body)
    except ValidationError as refused:
        field = (refused.details or {}).get("field") or "form"
        return _render(status=400, channel_form=form, channel_errors={field: refused.message})
    return _render(status=201, created_channel=created)


@blueprint.post("/alerts/channels/<int:channel_id>/delete")
@page_user
def alerts_channel_delete(channel_id: int):
    try:
        channels.delete_channel(signed_in_user(), channel_id)
    except Conflict as refused:  # a rule still sends to it
        return _render(status=409, channel_refusal=f"Channel #{channel_id}: {refused.message}.")
    return redirect(url_for("web.alerts_page"), code=303)


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
