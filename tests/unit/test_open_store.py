"""open_store picks the adapter from configuration (STO-1)."""

from __future__ import annotations

import pytest

from app.config import ConfigError, load_settings
from app.search import open_store
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.postgres_store import PostgresStore


def test_postgres_unless_an_elasticsearch_url_is_configured():
    settings, _ = load_settings(env={})
    assert isinstance(open_store(settings), PostgresStore)
    settings, _ = load_settings(env={"NETMAP_ELASTICSEARCH_URL": "http://127.0.0.1:1"})
    store = open_store(settings)
    try:
        assert isinstance(store, ElasticsearchStore)
        assert store.names.assets["user"] == "netmap-assets-user"
    finally:
        store.close()


def test_index_prefix_must_be_a_valid_index_name():
    with pytest.raises(ConfigError, match="index_prefix"):
        load_settings(env={}, overrides={"elasticsearch": {"index_prefix": "Net Map"}})
