"""The Elasticsearch the tests talk to: a real cluster when ``NETMAP_TEST_ES_URL`` is set,
otherwise the protocol simulator (one per session). Registered for the whole suite by the
root conftest (``pytest_plugins``), so any test or conftest can ask for ``es_target``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from app.bench.scratch import drop_elasticsearch_prefix
from app.config import ElasticsearchSettings, load_settings
from tests.support.es_simulator import EsSimulator

ES_URL_ENV = "NETMAP_TEST_ES_URL"


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
    """Settings for a test's own index prefix, so tests never see each other's documents."""
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
