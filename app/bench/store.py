"""`netmap bench store`: search-store write throughput on scratch data (STO, PRF).

Generates ``--endpoints`` synthetic endpoints, then measures on the chosen
backend: execution-endpoint writes (the upload path), publishing current assets
(two merges per endpoint, global and per-user, in projection pages sharded like
the projection does) first and again with newer sightings (republish), and how
fast the bulk bodies are built (CPU only, nothing sent). PostgreSQL runs on a
scratch embedded server (``app.bench.scratch``); Elasticsearch needs
``--es-url`` (a test cluster, or ``python -m tests.support.es_simulator``) and
writes only under a fresh ``netmap-bench-*`` index prefix, deleted afterwards.
Prints one JSON object; progress goes to stderr.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import click

from app.bench.progress import Progress
from app.bench.stats import summary_ms
from app.config import ElasticsearchSettings, load_settings
from app.projection.pages import current_asset_documents
from app.search.documents import EndpointDocument, observation_key
from app.search.ids import current_asset_id, execution_endpoint_id
from app.search.port import SearchStore, StorageScope

SERVICES = (
    (22, "ssh", "OpenSSH", "9.6p1", "SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13"),
    (80, "http", "nginx", "1.24.0", "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0"),
    (443, "https", "nginx", "1.24.0", "HTTP/1.1 200 OK\r\nServer: nginx/1.24.0"),
    (3306, "mysql", "MySQL", "8.0.36", "8.0.36-0ubuntu0.22.04.1"),
    (8080, "http-proxy", "Apache Tomcat", "10.1", "HTTP/1.1 404\r\nServer: Apache-Coyote"),
)
OWNERS = 10
BASE_TIME = datetime(2026, 11, 30, 6, 0, tzinfo=UTC)


def _endpoints(count: int) -> list[tuple[str, int, str, tuple[Any, ...]]]:
    """Deterministic synthetic endpoints: (ip, port, transport, service tuple)."""
    found = []
    for n in range(count):
        host = n // len(SERVICES)
        ip = f"10.{host >> 16 & 255}.{host >> 8 & 255}.{host & 255}"
        service = SERVICES[n % len(SERVICES)]
        found.append((ip, service[0], "tcp", service))
    return found


def _document(
    scope: str,
    endpoint: tuple[str, int, str, tuple[Any, ...]],
    *,
    execution_id: int,
    task_id: int,
    owner_id: int,
    seen: datetime,
) -> EndpointDocument:
    ip, port, transport, (_port, service, product, version, banner) = endpoint
    newest = {
        "state": "open",
        "service": service,
        "product": product,
        "version": version,
        "banner": banner,
        "hostname": None,
        "tags": ("bench",),
        "details": {"tls": None},
    }
    if scope == "execution":
        document_id = execution_endpoint_id(execution_id, ip, port, transport)
    else:
        document_id = current_asset_id(scope, owner_id, ip, port, transport)
    return EndpointDocument(
        id=document_id,
        scope=scope,
        ip=ip,
        port=port,
        transport=transport,
        first_seen=seen,
        first_execution_id=execution_id,
        last_seen=seen,
        last_execution_id=execution_id,
        owner_id=None if scope == "global" else owner_id,
        execution_id=execution_id if scope == "execution" else None,
        task_id=task_id if scope == "execution" else None,
        observation_key=observation_key(newest),
        **newest,
    )


def _pages(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _execution_docs(endpoints, execution_id: int, seen: datetime) -> list[EndpointDocument]:
    return [
        _document(
            "execution",
            e,
            execution_id=execution_id,
            task_id=execution_id,
            owner_id=1 + n % OWNERS,
            seen=seen,
        )
        for n, e in enumerate(endpoints)
    ]


def _measure_publish(
    store: SearchStore,
    pages: list[list[EndpointDocument]],
    es: ElasticsearchSettings,
    label: str,
) -> dict[str, Any]:
    latencies: list[float] = []
    merges = requests = request_bytes = 0
    progress = Progress(label, total=sum(len(p) for p in pages))
    started = time.perf_counter()
    for page in pages:
        page_started = time.perf_counter()
        result = store.publish_current(
            page, max_operations=es.bulk_batch_size, max_bytes=es.projection_bulk_max_bytes
        )
        result.raise_for_failures()
        latencies.append(time.perf_counter() - page_started)
        merges += len(page)
        requests += result.requests
        request_bytes += result.request_bytes
        progress.advance(len(page))
    elapsed = time.perf_counter() - started
    progress.finish()
    return {
        "merges": merges,
        "seconds": round(elapsed, 3),
        "merges_per_s": round(merges / elapsed, 1),
        "requests": requests,
        "request_mb": round(request_bytes / 1e6, 3),
        "page_latency": summary_ms(latencies),
    }


def _measure_body_building(store: SearchStore, pages: list[list[EndpointDocument]]) -> dict:
    """Build (do not send) every bulk body of the first publish; MB/s of bodies built."""
    from app.search.elasticsearch_bulk import iter_shard_bytes, shard_operations
    from app.search.elasticsearch_store import ElasticsearchStore
    from app.search.ids import pg_key
    from app.search.postgres_writes import endpoint_row

    built = 0
    started = time.perf_counter()
    for page in pages:
        if isinstance(store, ElasticsearchStore):
            operations, _rejected = store.merge_operations(page)
            shards = shard_operations(operations, max_operations=1000, max_bytes=5_242_880)
            built += sum(len(body) for body in iter_shard_bytes(shards))
        else:
            payload = "[" + ",".join(endpoint_row(doc, pg_key(doc.id)) for doc in page) + "]"
            built += len(payload.encode("utf-8"))
    elapsed = time.perf_counter() - started
    return {
        "bulk_body_mb": round(built / 1e6, 3),
        "bulk_body_mb_per_s": round(built / 1e6 / elapsed, 2),
    }


def run_benchmark(store: SearchStore, es: ElasticsearchSettings, count: int) -> dict[str, Any]:
    store.ensure_schema()
    endpoints = _endpoints(count)
    execution_docs = _execution_docs(endpoints, execution_id=1, seen=BASE_TIME)

    progress = Progress("execution endpoints", total=count)
    started = time.perf_counter()
    for page in _pages(execution_docs, es.bulk_batch_size):
        store.write_execution_endpoints(page).raise_for_failures()
        progress.advance(len(page))
    xep_seconds = time.perf_counter() - started
    progress.finish()

    started = time.perf_counter()
    store.refresh(StorageScope(months=("2026.11",)))
    refresh_seconds = time.perf_counter() - started

    page_size = es.projection_page_size
    first_pages = [current_asset_documents(p) for p in _pages(execution_docs, page_size)]
    body = _measure_body_building(store, first_pages)
    first = _measure_publish(store, first_pages, es, "publish")
    later = _execution_docs(endpoints, execution_id=2, seen=BASE_TIME + timedelta(days=1))
    again_pages = [current_asset_documents(p) for p in _pages(later, page_size)]
    again = _measure_publish(store, again_pages, es, "republish")
    started = time.perf_counter()
    store.refresh_current()
    refresh_current_seconds = time.perf_counter() - started
    return {
        "benchmark": "store",
        "backend": store.name,
        "endpoints": count,
        "merges_per_s": first["merges_per_s"],
        "republish_merges_per_s": again["merges_per_s"],
        **body,
        "execution_endpoint_writes_per_s": round(count / xep_seconds, 1),
        "publish": first,
        "republish": again,
        "refresh_seconds": round(refresh_seconds, 3),
        "refresh_current_seconds": round(refresh_current_seconds, 3),
        "projection_page_size": page_size,
        "bulk_batch_size": es.bulk_batch_size,
        "projection_bulk_max_bytes": es.projection_bulk_max_bytes,
    }


@contextlib.contextmanager
def _postgres_store() -> Iterator[tuple[SearchStore, ElasticsearchSettings]]:
    from app.bench.scratch import scratch_database
    from app.search.postgres_store import PostgresStore

    with scratch_database() as scratch:
        store = PostgresStore(scratch.settings)
        try:
            yield store, scratch.settings.elasticsearch
        finally:
            store.close()


@contextlib.contextmanager
def _elasticsearch_store(url: str) -> Iterator[tuple[SearchStore, ElasticsearchSettings]]:
    from app.bench.scratch import drop_elasticsearch_prefix
    from app.search.elasticsearch_store import ElasticsearchStore

    prefix = f"netmap-bench-{uuid.uuid4().hex[:8]}"
    settings, _ = load_settings(
        env={}, overrides={"elasticsearch": {"url": url, "index_prefix": prefix}}
    )
    store = ElasticsearchStore(settings.elasticsearch)
    try:
        yield store, settings.elasticsearch
    finally:
        store.close()
        drop_elasticsearch_prefix(url, prefix)  # only what this run created


@click.command("store")
@click.option(
    "--backend",
    type=click.Choice(["postgres", "elasticsearch"]),
    default="postgres",
    show_default=True,
)
@click.option(
    "--es-url", help="Elasticsearch test cluster or simulator (required for elasticsearch)."
)
@click.option("--endpoints", type=click.IntRange(1, 10_000_000), default=100_000, show_default=True)
def command(backend: str, es_url: str | None, endpoints: int) -> None:
    """Search-store merge and bulk-body throughput on scratch data."""
    if backend == "elasticsearch":
        if not es_url:
            raise click.UsageError("--backend elasticsearch needs --es-url")
        opened = _elasticsearch_store(es_url)
    else:
        opened = _postgres_store()
    with opened as (store, es_settings):
        result = run_benchmark(store, es_settings, endpoints)
    click.echo(json.dumps(result))
