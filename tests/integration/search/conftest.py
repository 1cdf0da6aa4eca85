"""Fixtures for the search-store tests: one ``store`` per adapter (the contract suite).

The Elasticsearch adapter runs against ``es_target`` (tests/support/es_target.py): a
real cluster when ``NETMAP_TEST_ES_URL`` is set, otherwise the protocol simulator. Every test
gets its own index prefix, so tests never see each other's documents, and its
indices, templates and script are deleted afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.config import ElasticsearchSettings
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.port import SearchStore
from app.search.postgres_store import PostgresStore
from tests.support.es_target import EsTarget, drop_prefix, es_settings_for

BACKENDS = ("postgres", "elasticsearch")


@pytest.fixture
def es_settings(es_target: EsTarget) -> Iterator[ElasticsearchSettings]:
    settings = es_settings_for(es_target.url)
    yield settings
    drop_prefix(es_target.url, settings)


@pytest.fixture
def postgres_store(settings, engine) -> Iterator[PostgresStore]:
    store = PostgresStore(settings)
    store.ensure_schema()
    yield store
    store.close()


@pytest.fixture
def elasticsearch_store(es_settings) -> Iterator[ElasticsearchStore]:
    store = ElasticsearchStore(es_settings)
    store.ensure_schema()
    yield store
    store.close()


@pytest.fixture(params=BACKENDS)
def store(request) -> SearchStore:
    return request.getfixturevalue(f"{request.param}_store")
