"""Object stores for the contract suite: the filesystem store, and the S3 store talking to
moto's S3 server through the fault proxy (and a real service when NETMAP_TEST_S3_URL is set).
The S3 server, proxy and settings helpers are in tests/support/s3.py."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from app.config import Settings, load_settings
from app.object_store import open_object_store
from app.object_store.events import InstrumentedObjectStore
from tests.support.s3 import real_s3_overrides, s3_overrides, store_settings
from tests.support.settings import TEST_SECRET_KEY

BACKENDS = ["filesystem", "s3"]
if os.environ.get("NETMAP_TEST_S3_URL"):
    BACKENDS.append("s3-real")


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
