"""Fixtures for the search-store tests: one ``store`` per adapter (the contract suite).

The Elasticsearch adapter runs against a real cluster when ``NETMAP_TEST_ES_URL``
is set, otherwise against the protocol simulator (one per session). Every test
gets its own index prefix, so tests never see each other's documents, and its
indices, templates and script are deleted afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app.bench.scratch import drop_elasticsearch_prefix
from app.config import ElasticsearchSettings, load_settings
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.port import SearchStore
from app.search.postgres_store import PostgresStore
from tests.support.es_simulator import EsSimulator

ES_URL_ENV = "NETMAP_TEST_ES_URL"
BACKENDS = ("postgres", "elasticsearch")


@dataclass
class EsTarget:
    url: str
    simulator: EsSimulator | None  # None: a real cluster


@pytest.fixture(scope="session")
def es_target() -> Iterator[EsTarget]:
    url = os.environ.get(ES_URL_ENV)
    if url:
        yield EsTarget(url=url, simulator=None)
        return
    with EsSimulator() as simulator:
        yield EsTarget(url=simulator.url, simulator=simulator)


def es_settings_for(url: str, **overrides) -> ElasticsearchSettings:
    values = {
        "url": url,
        "index_prefix": f"nmt-{uuid.uuid4().hex[:10]}",
        "request_timeout_seconds": 5.0,
        "bulk_retry_backoff_ms": 10,
        "index_replicas": 0,
        **overrides,
    }
    settings, _check = load_settings(env={}, overrides={"elasticsearch": values})
    return settings.elasticsearch


def drop_prefix(url: str, settings: ElasticsearchSettings) -> None:
    drop_elasticsearch_prefix(url, settings.index_prefix)


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
