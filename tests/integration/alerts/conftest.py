"""Fixtures for alert tests: a loopback webhook receiver, an aiosmtpd server, settings
that let alerts reach them (``allow_private_targets``) with test-sized retries, and an
app on the Elasticsearch store (``es``)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator

import pytest
from aiosmtpd.controller import Controller

from app import close_app, create_app
from app.config import Settings
from tests.support.api import Api
from tests.support.settings import make_settings
from tests.support.webhook_receiver import WebhookReceiver


class _Mailbox:
    def __init__(self) -> None:
        self.port = 0
        self.messages: list[tuple[list[str], bytes]] = []

    async def handle_DATA(self, server, session, envelope):
        self.messages.append((list(envelope.rcpt_tos), envelope.content))
        return "250 OK"


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    hooks = WebhookReceiver().start()
    yield hooks
    hooks.stop()


@pytest.fixture
def mailbox() -> Iterator[_Mailbox]:
    box = _Mailbox()
    # aiosmtpd checks its own port with a connection once started, so it needs a real one.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        box.port = probe.getsockname()[1]
    controller = Controller(box, hostname="127.0.0.1", port=box.port)
    controller.start()
    yield box
    controller.stop()


ALERTS = {
    "allow_private_targets": True,
    "retry_base_seconds": 0.01,
    "max_backoff_seconds": 1,
    "lease_seconds": 5,
    "timeout_seconds": 5,
}


@pytest.fixture
def settings(database_url: str, tmp_path, mailbox) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        alerts=ALERTS,
        smtp={
            "host": "127.0.0.1",
            "port": mailbox.port,
            "starttls": False,
            "from_address": "netmap@example.test",
        },
    )


@pytest.fixture
def es(es_target, engine, settings) -> Iterator[tuple[object, Api]]:
    """Settings naming a fresh index prefix on the Elasticsearch target, and the API of an
    app serving that store."""
    es_settings = settings.replace(
        elasticsearch={
            "url": es_target.url,
            "index_prefix": f"nmt-{uuid.uuid4().hex[:10]}",
            "bulk_retry_backoff_ms": 10,
            "index_replicas": 0,
        }
    )
    es_app = create_app(es_settings, engine=engine, modules="off")
    try:
        yield es_settings, Api(es_app)
    finally:
        close_app(es_app)
