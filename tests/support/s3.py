"""S3 for tests: moto's S3 server (one per session) behind a fault proxy (one per test),
the credentials the tests give the client, and settings for an object store.
Registered for the whole suite by the root conftest (``pytest_plugins``).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator

import pytest

from app.config import Settings, load_settings
from tests.support.s3_fault_proxy import FaultProxy, start_s3_server
from tests.support.settings import TEST_SECRET_KEY

# Credentials the tests give the S3 client; the suite checks they never reach an event.
TEST_ACCESS_KEY = "AKIANETMAPTESTKEY0001"
TEST_SECRET = "netmap-test-secret-access-key-0123456789"
TEST_SESSION_TOKEN = "netmap-test-session-token-abcdef"
_buckets = itertools.count(1)


@pytest.fixture(scope="session")
def s3_server_url() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's request log
    server, url = start_s3_server()
    yield url
    server.stop()


@pytest.fixture
def fault_proxy(s3_server_url: str) -> Iterator[FaultProxy]:
    proxy = FaultProxy(s3_server_url).start()
    yield proxy
    proxy.stop()


def s3_overrides(endpoint: str, **extra) -> dict:
    values = {
        "backend": "s3",
        "endpoint_url": endpoint,
        "bucket": f"netmap-test-{os.getpid()}-{next(_buckets)}",
        "path_style": True,
        "region": "us-east-1",
        "access_key_id": TEST_ACCESS_KEY,
        "secret_access_key": TEST_SECRET,
        "session_token": TEST_SESSION_TOKEN,
        "max_retries": 3,
        "retry_base_ms": 1,
        "part_size_bytes": 5 * 1024 * 1024,
    }
    values.update(extra)
    return values


def real_s3_overrides() -> dict:
    return {
        "backend": "s3",
        "endpoint_url": os.environ["NETMAP_TEST_S3_URL"],
        "bucket": os.environ.get("NETMAP_TEST_S3_BUCKET", "netmap-test"),
        "path_style": True,
        "region": os.environ.get("AWS_REGION", "us-east-1"),
    }


def store_settings(tmp_path, object_store: dict, database_url: str = "") -> Settings:
    overrides = {
        "security": {"secret_key": TEST_SECRET_KEY},
        "server": {"data_dir": str(tmp_path / "var")},
        "object_store": object_store,
    }
    if database_url:
        overrides["database"] = {"url": database_url, "pool_size": 5, "max_overflow": 5}
    settings, _ = load_settings(env={}, overrides=overrides)
    return settings
