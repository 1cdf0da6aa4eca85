"""The projection worker over each store adapter (PostgreSQL, ES simulator), for tests.

``projection`` gives a ``ProjectionSetup``: the real store wrapped in a
``ControlledStore`` (calls recorded, hooks to gate or fail them), settings with
test-sized pages, and ``worker(**overrides)`` for workers with other settings.
The Elasticsearch backend runs against ``es_target`` (the protocol simulator, or a
real cluster when ``NETMAP_TEST_ES_URL`` is set; fault-injection tests skip there).
The projection and the change-analysis tests share these fixtures: their conftests
import them from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from app.config import Settings
from app.projection.slices import ProjectionWorker
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.postgres_store import PostgresStore
from tests.support.es_simulator import EsSimulator
from tests.support.es_target import EsTarget, drop_prefix, es_settings_for
from tests.support.stores import ControlledStore

PROJECTION_DEFAULTS = {
    "projection_page_size": 10,
    "bulk_batch_size": 8,
    "projection_pages_per_tick": 4,
    "projection_lease_seconds": 10,
    "projection_heartbeat_seconds": 3,
    "projection_retry_base_seconds": 0.05,
    "projection_max_backoff_seconds": 1,
}


@dataclass
class ProjectionSetup:
    backend: str
    settings: Settings
    store: ControlledStore
    simulator: EsSimulator | None

    def with_settings(self, **elasticsearch: Any) -> Settings:
        return self.settings.replace(elasticsearch=elasticsearch)

    def worker(self, store: Any = None, **elasticsearch: Any) -> ProjectionWorker:
        settings = self.with_settings(**elasticsearch) if elasticsearch else self.settings
        return ProjectionWorker(settings, store if store is not None else self.store)

    def need_simulator(self) -> EsSimulator:
        if self.simulator is None:
            pytest.skip("needs the Elasticsearch simulator's fault injection")
        return self.simulator


@pytest.fixture(params=["postgres", "elasticsearch"])
def backend(request) -> str:
    return request.param


@pytest.fixture
def projection(backend, settings, engine, es_target) -> Iterator[ProjectionSetup]:
    yield from _setup(backend, settings, es_target)


@pytest.fixture
def es_projection(settings, engine, es_target) -> Iterator[ProjectionSetup]:
    yield from _setup("elasticsearch", settings, es_target)


@pytest.fixture
def pg_projection(settings, engine, es_target) -> Iterator[ProjectionSetup]:
    yield from _setup("postgres", settings, es_target)


def _setup(backend: str, settings: Settings, target: EsTarget) -> Iterator[ProjectionSetup]:
    if backend == "postgres":
        configured = settings.replace(elasticsearch=PROJECTION_DEFAULTS)
        store: Any = PostgresStore(configured)
        store.ensure_schema()
        try:
            yield ProjectionSetup(backend, configured, ControlledStore(store), None)
        finally:
            store.close()
        return
    es = es_settings_for(target.url, bulk_max_concurrency=1)
    configured = settings.replace(elasticsearch={**es.model_dump(), **PROJECTION_DEFAULTS})
    store = ElasticsearchStore(configured.elasticsearch)
    store.ensure_schema()
    if target.simulator is not None:
        target.simulator.clear_faults()
    try:
        yield ProjectionSetup(backend, configured, ControlledStore(store), target.simulator)
    finally:
        if target.simulator is not None:
            target.simulator.clear_faults()
        store.close()
        drop_prefix(target.url, es)


# The store call that starts a page on each backend (PostgreSQL publishes server-side).
PAGE_CALL = {"postgres": "publish_execution_page", "elasticsearch": "read_execution_endpoints"}
PUBLISH_CALL = {"postgres": "publish_execution_page", "elasticsearch": "publish_current"}


def page_cursors(setup: ProjectionSetup) -> list[str | None]:
    """The ``after_id`` of every page the worker started, in order."""
    name = PAGE_CALL[setup.backend]
    return [kwargs.get("after_id") for call, _args, kwargs in setup.store.calls if call == name]
