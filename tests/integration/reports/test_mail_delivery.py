"""Mail delivery against a real SMTP server on loopback (aiosmtpd, port 0) (REP-6).

Checks what the server really received: one message per recipient, the
multipart/alternative structure with the inline ``cid:`` images, the stored
Message-ID, and the per-recipient outcome of 4xx and 5xx replies.
"""

from __future__ import annotations

import asyncio
import email
import threading
from email import policy

import sqlalchemy as sa
from aiosmtpd.smtp import SMTP

from app.db import transaction
from app.object_store import open_object_store
from app.reports.delivery import claim_next_delivery, deliver
from tests.integration.reports.test_reports import (
    Renderer,
    _definition,
    _run,
    _scanned_task,
)


class Recorder:
    """Accepts mail, except 5xx for ``reject@`` and 4xx (once) for ``later@``."""

    def __init__(self):
        self.messages: list[tuple[list[str], bytes]] = []
        self.deferred = False

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        if address.startswith("reject@"):
            return "550 5.1.1 no such user"
        if address.startswith("later@") and not self.deferred:
            self.deferred = True
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((list(envelope.rcpt_tos), envelope.original_content))
        return "250 Message accepted"


class LoopbackSmtp:
    def __init__(self, **smtp_options):
        self.recorder = Recorder()
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def serve():
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                self.loop.create_server(lambda: SMTP(self.recorder, **smtp_options), "127.0.0.1", 0)
            )
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=serve, daemon=True)
        self.thread.start()
        ready.wait(10)

    def close(self):
        def stop():
            self.server.close()
            self.loop.stop()

        self.loop.call_soon_threadsafe(stop)
        self.thread.join(10)


def _deliver_all(settings) -> dict[str, str]:
    store = open_object_store(settings)
    outcomes = {}
    while (work := claim_next_delivery(lease_seconds=60)) is not None:
        outcomes[work.recipient] = deliver(settings, work, store)
    return outcomes


def test_smtp_delivery_mime_images_recipients_and_per_recipient_errors(api, settings):
    smtp = LoopbackSmtp()
    try:
        settings = settings.replace(
            smtp=settings.smtp.replace(host="127.0.0.1", port=smtp.port, starttls=False, ssl=False),
        )
        user, task = _scanned_task(api)
        recipients = ["alice@example.com", "reject@example.com", "later@example.com"]
        definition = _definition(user, task, recipients=recipients)
        report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()[
            "report"
        ]["id"]
        assert _run(settings, Renderer(settings)).result == "ready"

        first = _deliver_all(settings)
        assert first == {
            "alice@example.com": "sent",
            "reject@example.com": "failed",
            "later@example.com": "queued",
        }
        with transaction() as conn:
            conn.execute(sa.text("UPDATE report_deliveries SET available_at = now()"))
        assert _deliver_all(settings) == {"later@example.com": "sent"}

        received = {tuple(to): raw for to, raw in smtp.recorder.messages}
        assert set(received) == {("alice@example.com",), ("later@example.com",)}
        report = user.get(f"/api/reports/{report_id}").get_json()["report"]
        stored_ids = {d["recipient"]: d["message_id"] for d in report["deliveries"]}
        states = {d["recipient"]: d["status"] for d in report["deliveries"]}
        assert states == {
            "alice@example.com": "sent",
            "reject@example.com": "failed",
            "later@example.com": "sent",
        }
        message = email.message_from_bytes(received[("alice@example.com",)], policy=policy.default)
        assert message["Message-ID"] == stored_ids["alice@example.com"]
        assert message["To"] == "alice@example.com"
        assert message.get_content_type() == "multipart/alternative"
        text, related = message.get_payload()
        assert text.get_content_type() == "text/plain"
        assert related.get_content_type() == "multipart/related"
        html_part, *images = related.get_payload()
        assert html_part.get_content_type() == "text/html"
        html = html_part.get_content()
        cids = sorted(image["Content-ID"].strip("<>") for image in images)
        assert cids == ["new-endpoints", "services"]
        for cid in cids:
            assert f"cid:{cid}" in html
        assert all(image.get_payload(decode=True).startswith(b"\x89PNG") for image in images)
        assert "Endpoints" in text.get_content()
    finally:
        smtp.close()


def test_smtp_login_uses_the_password_stored_encrypted_by_the_cli(api, settings, database_url):
    from aiosmtpd.smtp import AuthResult

    from tests.integration.test_cli import run_cli
    from tests.support.settings import TEST_SECRET_KEY

    logins: list[tuple[bytes, bytes]] = []

    def authenticator(server, session, envelope, mechanism, auth_data):
        logins.append((auth_data.login, auth_data.password))
        return AuthResult(success=auth_data.password == b"s3cret-smtp-pass")

    stored = run_cli(
        database_url,
        "reports",
        "set-smtp-password",
        "--password-stdin",
        stdin="s3cret-smtp-pass\n",
        NETMAP_SECRET_KEY=TEST_SECRET_KEY,
    )
    assert stored.returncode == 0, stored.stderr
    assert "s3cret" not in stored.stdout + stored.stderr
    with transaction() as conn:
        ciphertext = conn.execute(
            sa.text("SELECT ciphertext FROM stored_secrets WHERE name = 'smtp.password'")
        ).scalar_one()
    assert "s3cret" not in ciphertext

    smtp = LoopbackSmtp(authenticator=authenticator, auth_require_tls=False)
    try:
        settings = settings.replace(
            smtp=settings.smtp.replace(
                host="127.0.0.1",
                port=smtp.port,
                starttls=False,
                ssl=False,
                username="netmap",
            ),
        )
        user, task = _scanned_task(api)
        definition = _definition(user, task, recipients=["alice@example.com"])
        user.post(f"/api/reports/definitions/{definition['id']}/run")
        assert _run(settings, Renderer(settings)).result == "ready"
        assert _deliver_all(settings) == {"alice@example.com": "sent"}
        assert logins == [(b"netmap", b"s3cret-smtp-pass")]
        assert len(smtp.recorder.messages) == 1
    finally:
        smtp.close()


def _send_one(settings, api):
    user, task = _scanned_task(api)
    definition = _definition(user, task, recipients=["alice@example.com"])
    user.post(f"/api/reports/definitions/{definition['id']}/run")
    assert _run(settings, Renderer(settings)).result == "ready"
    return _deliver_all(settings)


def test_smtp_security_none_sends_to_a_plain_relay_and_starttls_names_the_setting(api, settings):
    from app.config import smtp_security

    smtp = LoopbackSmtp()  # a plain relay: no STARTTLS offered
    try:
        plain = settings.smtp.replace(host="127.0.0.1", port=smtp.port)
        insisting = settings.replace(smtp=plain.replace(security="starttls"))
        assert smtp_security(insisting.smtp) == "starttls"
        assert _send_one(insisting, api) == {"alice@example.com": "failed"}
        with transaction() as conn:
            error = conn.execute(
                sa.text("SELECT last_error FROM report_deliveries ORDER BY id DESC LIMIT 1")
            ).scalar_one()
        assert "does not offer STARTTLS" in error and '[smtp] security = "none"' in error
        assert smtp.recorder.messages == []

        relaxed = settings.replace(smtp=plain.replace(security="none"))
        assert _send_one(relaxed, api) == {"alice@example.com": "sent"}
        assert len(smtp.recorder.messages) == 1
    finally:
        smtp.close()


def test_smtp_security_auto_follows_the_older_switches():
    from app.config import SmtpSettings, smtp_security

    assert smtp_security(SmtpSettings()) == "starttls"
    assert smtp_security(SmtpSettings(starttls=False)) == "none"
    assert smtp_security(SmtpSettings(ssl=True, starttls=False)) == "tls"
    assert smtp_security(SmtpSettings(ssl=True, security="none")) == "none"


def test_retry_resends_the_deliveries_of_a_report_whose_deliveries_all_failed(api, settings):
    smtp = LoopbackSmtp()
    try:
        plain = settings.smtp.replace(host="127.0.0.1", port=smtp.port)
        failing = settings.replace(smtp=plain.replace(security="starttls"))
        assert _send_one(failing, api) == {"alice@example.com": "failed"}
        with transaction() as conn:
            report_id = conn.execute(sa.text("SELECT max(id) FROM reports")).scalar_one()
        admin = api.admin()
        assert admin.get(f"/api/reports/{report_id}").get_json()["report"]["status"] == "ready"

        retried = admin.post(f"/api/reports/{report_id}/retry")
        assert retried.status_code == 202, retried.get_json()
        deliveries = retried.get_json()["report"]["deliveries"]
        assert [(d["recipient"], d["status"]) for d in deliveries] == [
            ("alice@example.com", "queued")
        ]
        working = settings.replace(smtp=plain.replace(security="none"))
        assert _deliver_all(working) == {"alice@example.com": "sent"}
        assert len(smtp.recorder.messages) == 1
        # Nothing failed any more: a second retry has nothing to do.
        again = admin.post(f"/api/reports/{report_id}/retry")
        assert again.status_code == 409
        assert again.get_json()["error"]["code"] == "report_not_failed"
    finally:
        smtp.close()


def test_a_report_image_lost_from_the_store_fails_its_deliveries_saying_so(api, settings):
    """An image gone from the object store (a bucket emptied) cannot come back: the
    delivery fails at once, naming it. It was retried past the attempts' limit, shown as
    "sending" with an unrelated earlier error."""
    user, task = _scanned_task(api)
    definition = _definition(user, task, recipients=["alice@example.com"])
    report_id = user.post(f"/api/reports/definitions/{definition['id']}/run").get_json()["report"][
        "id"
    ]
    assert _run(settings, Renderer(settings)).result == "ready"
    with transaction() as conn:
        images = conn.execute(
            sa.text("SELECT images FROM reports WHERE id = :id"), {"id": report_id}
        ).scalar_one()
    open_object_store(settings).delete(images[0]["key"])
    assert _deliver_all(settings) == {"alice@example.com": "failed"}
    with transaction() as conn:
        row = conn.execute(
            sa.text("SELECT status, attempts, last_error FROM report_deliveries")
        ).one()
    assert (row.status, row.attempts) == ("failed", 1)
    assert "no longer in the object store" in row.last_error
