"""Object stores for the contract suite: the filesystem store, and the S3 store talking to
moto's S3 server through the fault proxy (and a real service when NETMAP_TEST_S3_URL is set)."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator

import pytest

from app.config import Settings, load_settings
from app.object_store import open_object_store
from app.object_store.events import InstrumentedObjectStore
from tests.conftest import TEST_SECRET_KEY
from tests.support.s3_fault_proxy import FaultProxy, start_s3_server

# Credentials the tests give the S3 client; the suite checks they never reach an event.
TEST_ACCESS_KEY = "AKIANETMAPTESTKEY0001"
TEST_SECRET = "netmap-test-secret-access-key-0123456789"
TEST_SESSION_TOKEN = "netmap-test-session-token-abcdef"
_buckets = itertools.count(1)

BACKENDS = ["filesystem", "s3"]
if os.environ.get("NETMAP_TEST_S3_URL"):
    BACKENDS.append("s3-real")


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


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def store_settings_for(backend, tmp_path, request):
    """Settings for the parametrised backend (S3 goes through a fresh fault proxy)."""

    def make(**extra) -> Settings:
        if backend == "filesystem":
            return store_settings(tmp_path, {"backend": "filesystem", **extra})
        if backend == "s3-real":
            return store_settings(tmp_path, {**real_s3_overrides(), **extra})
        proxy = request.getfixturevalue("fault_proxy")
        return store_settings(tmp_path, s3_overrides(proxy.url, **extra))

    return make


@pytest.fixture
def object_store(store_settings_for) -> Iterator[InstrumentedObjectStore]:
    settings = store_settings_for()
    store = open_object_store(settings)
    if store.name == "s3":
        store.ensure_bucket()
    yield store
    store.close()


@pytest.fixture
def app_for_store(database_url, engine):
    """A netmap app that serves downloads for a given store's settings (same root and secret)."""
    from app import close_app, create_app

    made = []

    def make(store):
        root = str(store.root) if store.name == "filesystem" else ""
        settings, _ = load_settings(
            env={},
            overrides={
                "database": {"url": database_url},
                "security": {"secret_key": TEST_SECRET_KEY},
                "object_store": {"backend": store.name, "root": root},
            },
        )
        application = create_app(settings, engine=engine, modules="off")
        made.append(application)
        return application

    yield make
    for application in made:
        close_app(application)
