"""Mail delivery of ready reports: SMTP or the outbox directory (REP-6).

One delivery row per recipient. A runner claims a due row under a lease and
moves it to ``sending`` in a committed transaction *before* talking to SMTP;
the row's ``message_id`` was fixed when the report was committed, so every
attempt for that recipient sends the same Message-ID. Then the message is
built (multipart/alternative: plain text and HTML, the images as inline
``cid:`` parts of a multipart/related HTML part) and handed over with no
database connection held; the outcome is written in a new short transaction.

At-least-once window: a runner that dies after the server accepted the
message but before ``sent`` was committed leaves the row in ``sending``; once
its lease expired the row is claimed again and the same message (same
Message-ID) is sent again, and ``last_error`` says a resend happened, so the
duplicate is detectable by the recipient's mail system and by us. No other
path sends twice.

Errors: connection failures and 4xx replies are retried with exponential
backoff up to ``[reports] delivery_max_attempts``; a 5xx for this recipient
fails this delivery only. Without ``[smtp] host`` the message is written as an
``.eml`` file under the outbox directory and the delivery is ``written``.
"""

from __future__ import annotations

import logging
import os
import smtplib
import ssl
import time
import uuid
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from app.config import Settings, smtp_security
from app.db import transaction
from app.identity.secrets_at_rest import SecretBox, get_secret
from app.leases import Heartbeat, LeasedRows, LeaseGuard, LeaseLost
from app.object_store.port import ObjectNotFound, ObjectStore, ObjectStoreUnavailable
from app.observability import emit

# A delivery row is held under a lease while it is ``sending``.
DELIVERIES = LeasedRows("report_deliveries", "id", condition="status = 'sending'")
SMTP_PASSWORD_SECRET = "smtp.password"  # noqa: S105 - the name of the stored secret, not a secret


@dataclass(frozen=True)
class DeliveryClaim:
    id: int
    report_id: int
    recipient: str
    message_id: str
    claim_token: uuid.UUID
    attempts: int
    resend: bool  # the previous attempt may have been accepted (it died in ``sending``)
    lease_seconds: float = 120.0
    claimed_at: float = 0.0  # monotonic, when the claim was asked for


class TemporaryDeliveryError(Exception):
    pass


class PermanentDeliveryError(Exception):
    pass


def claim_next_delivery(*, lease_seconds: float) -> DeliveryClaim | None:
    claimed_at = time.monotonic()
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                """
                WITH next AS (
                    SELECT id, status AS previous FROM report_deliveries
                    WHERE (status = 'queued' AND available_at <= now())
                       OR (status = 'sending' AND lease_expires_at < now())
                    ORDER BY available_at, id
                    LIMIT 1
                    FOR UPDATE SKIP LOCKED
                )
                UPDATE report_deliveries d
                   SET status = 'sending', claim_token = gen_random_uuid(),
                       lease_expires_at = now() + make_interval(secs => :lease),
                       attempts = d.attempts + 1
                  FROM next WHERE d.id = next.id
                RETURNING d.id, d.report_id, d.recipient, d.message_id, d.claim_token,
                          d.attempts, next.previous
                """
            ),
            {"lease": lease_seconds},
        ).one_or_none()
    if row is None:
        return None
    return DeliveryClaim(
        row.id,
        row.report_id,
        row.recipient,
        row.message_id,
        row.claim_token,
        row.attempts,
        resend=row.previous == "sending",
        lease_seconds=lease_seconds,
        claimed_at=claimed_at,
    )


def renew(claim: DeliveryClaim) -> bool:
    """Extend the lease of a delivery being sent; False means ownership was lost."""
    return DELIVERIES.renew(claim.id, claim.claim_token, claim.lease_seconds)


def _finish(claim: DeliveryClaim, status: str, error: str | None, retry_seconds: float = 0) -> bool:
    # Only the token is checked, not the lease: a message the server accepted after our
    # lease ran out is still ours to record, and recording it prevents a second send.
    with transaction() as conn:
        return bool(
            conn.execute(
                sa.text(
                    """
                    UPDATE report_deliveries
                       SET status = :status, last_error = :error, claim_token = NULL,
                           lease_expires_at = NULL,
                           sent_at = CASE WHEN :status IN ('sent', 'written') THEN now() END,
                           available_at = now() + make_interval(secs => :retry)
                     WHERE id = :id AND claim_token = :token AND status = 'sending'
                    RETURNING 1
                    """
                ),
                {
                    "id": claim.id,
                    "token": claim.claim_token,
                    "status": status,
                    "error": error[:1000] if error else None,
                    "retry": retry_seconds,
                },
            ).scalar()
        )


class _TextOfHtml(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        # HTML's own rule: a run of white space (a line break in the template too) is one
        # space; only the block ends below break lines.
        if data.strip():
            self.parts.append(" ".join(data.split()))

    def handle_endtag(self, tag: str) -> None:
        if tag in {"p", "tr", "h1", "h2", "table", "div"}:
            self.parts.append("\n")


def plain_text(html: str) -> str:
    parser = _TextOfHtml()
    parser.feed(html)
    lines = " ".join(parser.parts).split("\n")
    return "\n".join(line.strip() for line in lines if line.strip()) + "\n"


def build_message(
    *,
    sender: str,
    recipient: str,
    message_id: str,
    subject: str,
    html: str,
    images: list[tuple[str, bytes]],
) -> EmailMessage:
    message = EmailMessage()
    message["From"] = sender
    message["To"] = recipient
    message["Subject"] = subject
    message["Date"] = formatdate(usegmt=True)
    message["Message-ID"] = message_id
    message.set_content(plain_text(html))
    message.add_alternative(html, subtype="html")
    html_part = message.get_payload()[1]
    for token, png in images:
        html_part.add_related(png, "image", "png", cid=f"<{token}>", filename=f"{token}.png")
    return message


def _load(claim: DeliveryClaim) -> Any:
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT subject, html, images FROM reports WHERE id = :id"),
            {"id": claim.report_id},
        ).one_or_none()


def _smtp_password(settings: Settings) -> str:
    if settings.smtp.password:
        return settings.smtp.password
    with transaction() as conn:
        stored = get_secret(conn, SecretBox(settings.security), SMTP_PASSWORD_SECRET)
    return stored or ""


def send_smtp(settings: Settings, message: EmailMessage, recipient: str) -> None:
    smtp = settings.smtp
    security = smtp_security(smtp)
    try:
        if security == "tls":
            client: smtplib.SMTP = smtplib.SMTP_SSL(
                smtp.host,
                smtp.port,
                timeout=smtp.timeout_seconds,
                context=ssl.create_default_context(),
            )
        else:
            client = smtplib.SMTP(smtp.host, smtp.port, timeout=smtp.timeout_seconds)
        with client:
            if security == "starttls":
                client.ehlo()
                if not client.has_extn("starttls"):
                    # Retrying cannot help: the server (a plain local relay?) has no STARTTLS.
                    raise PermanentDeliveryError(
                        f"the SMTP server {smtp.host}:{smtp.port} does not offer STARTTLS: "
                        'set [smtp] security = "none" for a plain relay '
                        '(or "tls" for implicit TLS, port 465)'
                    )
                client.starttls(context=ssl.create_default_context())
            if smtp.username:
                client.login(smtp.username, _smtp_password(settings))
            client.send_message(message, from_addr=smtp.from_address, to_addrs=[recipient])
    except smtplib.SMTPRecipientsRefused as exc:
        code, reply = next(iter(exc.recipients.values()))
        _raise_for(code, reply)
    except smtplib.SMTPResponseException as exc:
        _raise_for(exc.smtp_code, exc.smtp_error)
    except ssl.SSLError as exc:
        raise TemporaryDeliveryError(
            f"{type(exc).__name__}: {exc} (TLS with {smtp.host}:{smtp.port} failed; "
            f'[smtp] security = "{security}")'
        ) from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise TemporaryDeliveryError(f"{type(exc).__name__}: {exc}") from exc


def _raise_for(code: int, reply: bytes | str) -> None:
    text = reply.decode("utf-8", "replace") if isinstance(reply, bytes) else str(reply)
    if 500 <= code < 600:
        raise PermanentDeliveryError(f"{code} {text}")
    raise TemporaryDeliveryError(f"{code} {text}")


def outbox_directory(settings: Settings) -> Path:
    configured = settings.reports.outbox_dir
    return settings.resolve_path(configured) if configured else settings.data_dir / "outbox"


def write_outbox(settings: Settings, claim: DeliveryClaim, message: EmailMessage) -> Path:
    directory = outbox_directory(settings)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"report-{claim.report_id}-delivery-{claim.id}.eml"
    partial = final.with_suffix(".eml.partial")
    partial.write_bytes(message.as_bytes())
    os.replace(partial, final)  # readers never see half a message
    return final


def retry_delay_seconds(attempts: int) -> float:
    return float(min(30 * 2 ** max(attempts - 1, 0), 3600))


def deliver(settings: Settings, claim: DeliveryClaim, object_store: ObjectStore) -> str:
    """Send (or write) one claimed delivery; returns the status recorded.

    The lease kit's heartbeat keeps the claim while images are read and the server
    talks; a claim lost before the hand-over sends nothing (``lease_lost``): the row is
    someone else's, and they send it."""
    guard = LeaseGuard(claim.lease_seconds, claimed_at=claim.claimed_at)
    with Heartbeat(
        lambda: renew(claim),
        guard,
        interval=claim.lease_seconds / 3,
        name=f"delivery-heartbeat-{claim.id}",
        failed_event="ReportDeliveryHeartbeatFailed",
        event_fields={"delivery_id": claim.id},
    ):
        try:
            return _deliver(settings, claim, object_store, guard)
        except LeaseLost as lost:
            emit(
                "ReportDeliveryLeaseLost",
                level=logging.WARNING,
                delivery_id=claim.id,
                reason=lost.reason,
            )
            return "lease_lost"


def _deferred(settings: Settings, claim: DeliveryClaim, error: str) -> str:
    """A temporary failure: queued again after a backoff, or failed after the last attempt."""
    last = claim.attempts >= settings.reports.delivery_max_attempts
    status = "failed" if last else "queued"
    _finish(claim, status, error, retry_delay_seconds(claim.attempts))
    emit(
        "ReportMailDeferred",
        level=logging.WARNING,
        delivery_id=claim.id,
        attempt=claim.attempts,
        status=status,
        error=error,
    )
    return status


def _deliver(
    settings: Settings, claim: DeliveryClaim, object_store: ObjectStore, guard: LeaseGuard
) -> str:
    report = _load(claim)
    if report is None or report.html is None:
        _finish(claim, "failed", "the report has no archived mail")
        return "failed"
    images = []
    try:
        for image in report.images:
            with object_store.open(image["key"]) as handle:
                images.append((image["token"], handle.read()))
    except ObjectNotFound as gone:
        # Lost from the store (a bucket emptied): no attempt can find it again. It was
        # retried past the attempts' limit, with an unrelated earlier error shown.
        error = f"the report's image {gone.key} is no longer in the object store"
        _finish(claim, "failed", error)
        emit("ReportMailRejected", level=logging.WARNING, delivery_id=claim.id, error=error)
        return "failed"
    except ObjectStoreUnavailable as exc:
        return _deferred(settings, claim, f"object store: {exc}")
    message = build_message(
        sender=settings.smtp.from_address,
        recipient=claim.recipient,
        message_id=claim.message_id,
        subject=report.subject,
        html=report.html,
        images=images,
    )
    note = "resent after an interrupted attempt (same Message-ID)" if claim.resend else None
    guard.raise_if_lost()
    if not settings.smtp.host:
        write_outbox(settings, claim, message)
        _finish(claim, "written", note)
        emit("ReportMailWritten", report_id=claim.report_id, delivery_id=claim.id)
        return "written"
    try:
        send_smtp(settings, message, claim.recipient)
    except PermanentDeliveryError as exc:
        _finish(claim, "failed", str(exc))
        emit("ReportMailRejected", level=logging.WARNING, delivery_id=claim.id, error=str(exc))
        return "failed"
    except TemporaryDeliveryError as exc:
        return _deferred(settings, claim, str(exc))
    _finish(claim, "sent", note)
    emit("ReportMailSent", report_id=claim.report_id, delivery_id=claim.id)
    return "sent"
