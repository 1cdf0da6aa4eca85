"""Search store: raw facts, the execution-endpoint projection and current assets (STO).

``open_store(settings)`` returns the configured ``SearchStore`` adapter:
Elasticsearch when ``[elasticsearch] url`` is set, PostgreSQL otherwise.
"""

from __future__ import annotations

from app.config import Settings
from app.search.port import SearchStore


def open_store(settings: Settings) -> SearchStore:
    if settings.elasticsearch.url:
        from app.search.elasticsearch_store import ElasticsearchStore

        return ElasticsearchStore(settings.elasticsearch)
    from app.search.postgres_store import PostgresStore

    return PostgresStore(settings)
