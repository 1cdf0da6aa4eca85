"""Sending one alert message through its channel; no database connection is held here.

* webhook: the body is ``{"type", "timestamp", "data"}`` (Standard Webhooks' shape);
  headers ``webhook-id`` (the delivery id, the same on every attempt),
  ``webhook-timestamp`` (this attempt) and ``webhook-signature``: ``v1,<HMAC-SHA256>``
  made by the ``standardwebhooks`` library with the channel's secret, plus a second
  signature with the previous secret while a rotation's overlap lasts.
* email: a plain-text message whose ``Message-ID`` is derived from the delivery id,
  sent with the reports' SMTP client (``app.reports.delivery.send_smtp``) or, with no
  SMTP host, written to the same ``.eml`` outbox directory.
* apprise: the decrypted URL handed to the ``apprise`` library, with every connection
  the plugin makes during the send judged by the address rule as it connects
  (``outbound.guarded_connections``). The library's own logger is silenced
  (``app/alerts/__init__.py``): it may print the URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

import orjson

from app.alerts import outbound
from app.alerts.channels import Channel
from app.alerts.outbound import OutboundPolicy, PermanentDeliveryError, TemporaryDeliveryError
from app.config import Settings
from app.identity.secrets_at_rest import SecretBox


@dataclass(frozen=True)
class Message:
    id: str  # the delivery id: webhook-id, email Message-ID, the same on every attempt
    event_type: str
    created_at: datetime
    payload: dict[str, Any]


def policy(settings: Settings) -> OutboundPolicy:
    config = settings.alerts
    return OutboundPolicy(
        allow_private=config.allow_private_targets,
        timeout_seconds=config.timeout_seconds,
        max_response_bytes=config.max_response_bytes,
    )


def webhook_body(message: Message) -> bytes:
    """The same bytes on every attempt: the timestamp inside is the message's creation."""
    return orjson.dumps(
        {
            "type": message.event_type,
            "timestamp": message.created_at.astimezone(UTC).isoformat(),
            "data": message.payload,
        }
    )


def signing_secrets(settings: Settings, channel: Channel, now: datetime) -> list[str]:
    box = SecretBox(settings.security)
    found = [box.decrypt(channel.secret_encrypted)] if channel.secret_encrypted else []
    if (
        channel.previous_secret_encrypted
        and channel.previous_secret_until is not None
        and channel.previous_secret_until > now
    ):
        found.append(box.decrypt(channel.previous_secret_encrypted))
    return found


def send_webhook(settings: Settings, channel: Channel, message: Message) -> str:
    from standardwebhooks.webhooks import Webhook

    now = datetime.now(UTC)
    body = webhook_body(message)
    text = body.decode("utf-8")
    signatures = [
        Webhook(secret).sign(message.id, now, text)
        for secret in signing_secrets(settings, channel, now)
    ]
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "netmap-alerts",
        "webhook-id": message.id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": " ".join(signatures),
    }
    answer = outbound.post(channel.url or "", body, headers, policy(settings))
    return f"HTTP {answer.status}"


def span_text(seconds: float) -> str:
    """A length of time for people, in its largest unit and the next one when that is not
    zero: "2 days 23 hours", "4 hours", "3 minutes 20 seconds". Rounded down: never more
    than it was."""
    left = max(int(seconds), 0)
    counts = []
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60), ("second", 1)):
        count, left = divmod(left, size)
        counts.append((count, unit))
    lead = next((i for i, (count, _) in enumerate(counts) if count), len(counts) - 1)
    shown = [c for c in counts[lead : lead + 2] if c[0]] or [counts[-1]]
    return " ".join(f"{count} {unit}{'' if count == 1 else 's'}" for count, unit in shown)


def _time_left(cert: dict[str, Any], message: Message, *, ago: bool = False) -> str:
    """Time from the message's creation to the certificate's ``not_after`` (``ago``: since
    it, for an expired one). ``days_left`` alone is whole days, and "expires in 2 days"
    for 2 days 23 hours read as a day less than there was."""
    try:
        not_after = datetime.fromisoformat(str(cert.get("not_after")).replace("Z", "+00:00"))
        left = (not_after - message.created_at).total_seconds()
        return span_text(-left if ago else left)
    except (TypeError, ValueError):  # not a time: what the payload says
        return f"{abs(cert.get('days_left') or 0)} days"


def _fields_suffix(change: dict[str, Any]) -> str:
    """ " (version, cert_sha256)": what a changed or reappeared endpoint differs in."""
    fields = change.get("changed_fields")
    return f" ({', '.join(fields)})" if fields else ""


def summary_text(message: Message) -> tuple[str, str]:
    """(title, body) of a message for people: email and chat."""
    data = message.payload
    rule = (data.get("rule") or {}).get("name", "")
    if message.event_type == "netmap.test":
        return "netmap test message", "This is a test message from netmap."
    if "scanner" in data:  # scanner_offline rules (app.alerts.conditions)
        scanner = data["scanner"]
        back = data.get("status") == "online"
        title = f"netmap: scanner {scanner['name']} is {'back online' if back else 'offline'}"
        lines = [f"Rule: {rule}", title.removeprefix("netmap: ")]
        if not back:
            lines.append(
                f"Last sign of life: {data.get('offline_since')} "
                f"(offline after {data.get('offline_seconds')} s without one)"
            )
        elif data.get("offline_for_seconds") is not None:  # older messages lack it
            lines.append(
                f"Away for {span_text(data['offline_for_seconds'])}: no sign of life "
                f"from {data.get('offline_since')} to {scanner.get('last_seen_at')}"
            )
        if data.get("link"):
            lines.append(data["link"])
        return title, "\n".join(lines)
    if "run" in data:  # run_failed rules (app.alerts.conditions)
        run = data["run"]
        title = f"netmap: run {run['number']} of {run['task_name']} {run['status']}"
        lines = [
            f"Rule: {rule}",
            f"Task: {run['task_name']} (#{run['task_id']}), run {run['number']} ({run['trigger']})",
            f"Status: {run['status']}: {run['failed_executions']} of {run['executions']} "
            "execution(s) failed",
            f"Finished: {run['finished_at']}",
        ]
        if data.get("link"):
            lines.append(data["link"])
        return title, "\n".join(lines)
    if "certificate" in data:  # certificate_expires rules (app.alerts.conditions)
        cert = data["certificate"]
        name = cert.get("subject_cn") or cert.get("fingerprint") or "a certificate"
        when = (
            f"expired {_time_left(cert, message, ago=True)} ago"
            if cert.get("expired")
            else f"expires in {_time_left(cert, message)}"
        )
        title = f"netmap: certificate {name} {when}"
        lines = [
            f"Rule: {rule}",
            f"Certificate: {name} (issuer {cert.get('issuer') or 'unknown'})",
            f"Not after: {cert.get('not_after')}",
            f"SHA-256: {cert.get('fingerprint') or 'not reported'}",
            f"Served on {data.get('endpoint_count', 0)} endpoint(s):",
        ]
        for endpoint in data.get("endpoints", []):
            lines.append(f"  {endpoint['ip']}:{endpoint['port']}/{endpoint['transport']}")
        if data.get("link"):
            lines.append(data["link"])
        return title, "\n".join(lines)
    if "change" in data:
        change = data["change"]
        title = f"netmap: {change['kind']} {change['ip']}:{change['port']}/{change['transport']}"
        lines = [f"Rule: {rule}"]
        if data.get("task_name"):  # messages queued before it was in the payload lack it
            title += f" in {data['task_name']}"
            lines.append(f"Task: {data['task_name']} (#{change.get('task_id')})")
        lines.append(f"Change: {change['kind']}{_fields_suffix(change)}")
        for side in ("old", "new"):
            if change.get(side):
                values = ", ".join(f"{k}={v}" for k, v in change[side].items() if v is not None)
                lines.append(f"{side}: {values}")
        if data.get("link"):
            lines.append(data["link"])
        return title, "\n".join(lines)
    counts = data.get("counts", {})
    counted = ", ".join(f"{counts[k]} {k}" for k in counts if counts[k])
    task = data.get("task_name")
    title = f"netmap: {counted}{f' in {task}' if task else ''} ({rule})"
    lines = [f"Rule: {rule}"]
    if data.get("run_number") is not None:
        named = f"Task: {task} (#{data.get('task_id')})" if task else f"Task #{data.get('task_id')}"
        lines.append(f"{named}, run {data['run_number']} ({data.get('run_status')})")
    lines.append(f"Changes: {data.get('total', 0)}")
    for change in data.get("changes", []):
        lines.append(
            f"  {change['kind']} {change['ip']}:{change['port']}/{change['transport']}"
            f"{_fields_suffix(change)}"
        )
    if data.get("more"):
        lines.append(f"  … and {data['more']} more")
    if data.get("link"):
        lines.append(data["link"])
    return title, "\n".join(lines)


def send_email(settings: Settings, channel: Channel, message: Message) -> str:
    from app.reports.delivery import (
        PermanentDeliveryError as MailRefused,
    )
    from app.reports.delivery import (
        TemporaryDeliveryError as MailLater,
    )
    from app.reports.delivery import (
        outbox_directory,
        send_smtp,
    )

    title, text = summary_text(message)
    mail = EmailMessage()
    mail["Subject"] = title
    mail["From"] = settings.smtp.from_address
    mail["To"] = ", ".join(channel.recipients)
    mail["Message-ID"] = f"<{message.id}@netmap.alerts>"
    # RFC 5322 requires it; the message's own time, the same on every delivery attempt.
    mail["Date"] = formatdate(message.created_at.timestamp(), usegmt=True)
    mail.set_content(text)
    if not settings.smtp.host:
        directory = outbox_directory(settings)
        directory.mkdir(parents=True, exist_ok=True)
        final = directory / f"alert-{message.id}.eml"
        partial = final.with_suffix(".eml.partial")
        partial.write_bytes(mail.as_bytes())
        os.replace(partial, final)  # same name on a retry: the outbox holds one copy
        return "written to the outbox"
    try:
        for recipient in channel.recipients:
            send_smtp(settings, mail, recipient)
    except MailRefused as exc:
        raise PermanentDeliveryError(str(exc)) from exc
    except MailLater as exc:
        raise TemporaryDeliveryError(str(exc)) from exc
    return "sent"


def send_apprise(settings: Settings, channel: Channel, message: Message) -> str:
    import apprise

    url = SecretBox(settings.security).decrypt(channel.secret_encrypted or "")
    plugin = apprise.Apprise.instantiate(url)
    if plugin is None:
        raise PermanentDeliveryError("the stored Apprise URL is no longer understood")
    title, text = summary_text(message)
    sender = apprise.Apprise()
    sender.add(plugin)
    with outbound.guarded_connections(policy(settings)) as refused:
        delivered = sender.notify(body=text, title=title)
    if refused:
        raise PermanentDeliveryError(
            "target refused: " + ", ".join(refused) + " (set [alerts] allow_private_targets)"
        )
    if not delivered:
        # Apprise does not say why here; its log (silenced: it may hold the URL) would.
        raise TemporaryDeliveryError("Apprise could not deliver the message")
    return "sent"


SENDERS = {"webhook": send_webhook, "email": send_email, "apprise": send_apprise}


def send(settings: Settings, channel: Channel, message: Message) -> str:
    """Send one message; raises Temporary/PermanentDeliveryError; returns a short note."""
    return SENDERS[channel.kind](settings, channel, message)
