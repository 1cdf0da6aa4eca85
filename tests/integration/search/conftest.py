"""Fixtures for the search-store tests: one ``store`` per adapter (the contract suite)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.search.port import SearchStore
from app.search.postgres_store import PostgresStore

BACKENDS = ("postgres",)


@pytest.fixture
def postgres_store(settings, engine) -> Iterator[PostgresStore]:
    store = PostgresStore(settings)
    store.ensure_schema()
    yield store
    store.close()


@pytest.fixture(params=BACKENDS)
def store(request) -> SearchStore:
    return request.getfixturevalue(f"{request.param}_store")
