"""The port's optional capabilities are declared, typed and found the same way (STO-1)."""

from __future__ import annotations

import inspect

from app.config import load_settings
from app.search import open_store
from app.search.port import ServerSidePages, server_side_pages, sightings_in_database
from app.search.postgres_store import PostgresStore
from tests.support.stores import ControlledStore


def _stores():
    settings, _ = load_settings(env={})
    postgres = open_store(settings)
    settings, _ = load_settings(env={"NETMAP_ELASTICSEARCH_URL": "http://127.0.0.1:1"})
    return postgres, open_store(settings)


def test_the_postgres_store_publishes_pages_server_side_and_elasticsearch_does_not():
    postgres, elasticsearch = _stores()
    try:
        assert server_side_pages(postgres) is postgres
        assert server_side_pages(elasticsearch) is None
    finally:
        postgres.close()
        elasticsearch.close()


def test_a_forwarding_wrapper_has_the_capability_of_the_store_it_wraps():
    postgres, elasticsearch = _stores()
    try:
        wrapped = ControlledStore(postgres)
        assert server_side_pages(wrapped) is wrapped
        assert server_side_pages(ControlledStore(elasticsearch)) is None
    finally:
        postgres.close()
        elasticsearch.close()


def test_the_postgres_method_has_the_declared_signature():
    declared = inspect.signature(ServerSidePages.publish_execution_page)
    implemented = inspect.signature(PostgresStore.publish_execution_page)
    assert [(p.name, p.kind, p.default) for p in declared.parameters.values()] == [
        (p.name, p.kind, p.default) for p in implemented.parameters.values()
    ]


def test_only_the_postgres_store_gives_its_sightings_as_sql():
    postgres, elasticsearch = _stores()
    try:
        assert sightings_in_database(postgres) is postgres
        assert ":execution_id" in postgres.execution_sightings_sql()
        assert ":after_id" in postgres.execution_sightings_page_sql()
        assert sightings_in_database(ControlledStore(postgres)) is not None
        assert sightings_in_database(elasticsearch) is None
        assert sightings_in_database(ControlledStore(elasticsearch)) is None
    finally:
        postgres.close()
        elasticsearch.close()
