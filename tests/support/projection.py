"""Projection tests: succeeded executions with endpoints, the expected current assets, the row.

``seed_execution`` creates what a final leaves behind (a succeeded ports
execution, its execution endpoints in the store, its outbox row) without going
through HTTP, so tests can make thousands of endpoints quickly. ``expected_current``
is the from-scratch projection (the merge rule over every execution's endpoints);
``stored_current`` reads what the store holds through the port's asset search.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from app.db import transaction
from app.projection.pages import current_asset_documents
from app.projection.slices import ProjectionWorker, SliceOutcome
from app.search.documents import EndpointDocument, merge_all
from app.search.port import AssetQuery, SearchStore
from tests.support.search_documents import BASE_TIME, execution_endpoint

_names = itertools.count(1)


def create_owner() -> int:
    with transaction() as conn:
        return conn.execute(
            sa.text("INSERT INTO users (username, password_hash) VALUES (:n, 'x') RETURNING id"),
            {"n": f"owner-{next(_names)}"},
        ).scalar_one()


def create_execution(owner_id: int, *, status: str = "succeeded", outbox: bool = True) -> int:
    with transaction() as conn:
        task_id = conn.execute(
            sa.text(
                "INSERT INTO scan_tasks (owner_id, name, targets, ports, transports, scan_plan) "
                "VALUES (:o, 't', '[]', '1-65535', '{tcp}', '{}') RETURNING id"
            ),
            {"o": owner_id},
        ).scalar_one()
        execution_id = conn.execute(
            sa.text(
                "INSERT INTO scan_executions (task_id, kind, status, targets, ports, transports, "
                "finished_at) VALUES (:t, 'ports', :s, '[]', '1-65535', '{tcp}', now()) "
                "RETURNING id"
            ),
            {"t": task_id, "s": status},
        ).scalar_one()
        if outbox:
            conn.execute(
                sa.text("INSERT INTO scan_projection_outbox (execution_id) VALUES (:e)"),
                {"e": execution_id},
            )
    return execution_id


def endpoints_for(
    execution_id: int,
    owner_id: int,
    count: int,
    *,
    minutes: float = 0,
    first_ip: int = 0,
    **fields: Any,
) -> list[EndpointDocument]:
    """``count`` endpoints of one execution: 10.x.y.z on ports 22/80/443, deterministic."""
    docs = []
    for n in range(first_ip, first_ip + count):
        host, port = divmod(n, 3)
        ip = f"10.{host >> 16 & 255}.{host >> 8 & 255}.{host & 255}"
        docs.append(
            execution_endpoint(
                execution_id,
                ip,
                (22, 80, 443)[port],
                task_id=execution_id,
                owner_id=owner_id,
                seen=BASE_TIME + timedelta(minutes=minutes, seconds=n % 50),
                **{
                    "service": ("ssh", "http", "https")[port],
                    "banner": f"banner {execution_id}/{n}",
                    **fields,
                },
            )
        )
    return docs


def seed_execution(
    store: SearchStore,
    count: int,
    *,
    owner_id: int | None = None,
    minutes: float = 0,
    first_ip: int = 0,
    **fields: Any,
) -> tuple[int, list[EndpointDocument]]:
    owner = owner_id or create_owner()
    execution_id = create_execution(owner)
    docs = endpoints_for(execution_id, owner, count, minutes=minutes, first_ip=first_ip, **fields)
    for start in range(0, len(docs), 500):
        store.write_execution_endpoints(docs[start : start + 500]).raise_for_failures()
    if docs:
        from app.search.port import StorageScope

        store.refresh(StorageScope(months=(docs[0].first_seen.strftime("%Y.%m"),)))
    return execution_id, docs


def expected_current(executions: Iterable[Sequence[EndpointDocument]]) -> dict[str, Any]:
    merged = merge_all(d for docs in executions for d in current_asset_documents(docs))
    return {d.id: d for d in merged}


def stored_current(store: SearchStore, owners: Iterable[int]) -> dict[str, Any]:
    """Every global asset and the given owners' assets, by id."""
    found: dict[str, Any] = {}
    queries = [AssetQuery(scope="global", limit=5000)]
    queries += [AssetQuery(scope="user", owner_id=o, limit=5000) for o in sorted(set(owners))]
    for query in queries:
        cursor = None
        while True:
            page = store.search_assets(
                AssetQuery(**{**query.__dict__, "cursor": cursor})  # type: ignore[arg-type]
            )
            for doc in page.items:
                found[doc.id] = doc
            cursor = page.next_cursor
            if cursor is None:
                break
    return found


def outbox_row(execution_id: int) -> Any:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT execution_id, claim_token, lease_expires_at, cursor, phase, "
                "processed_endpoints, attempts, last_error, available_at, processed_at, "
                "available_at > now() AS waiting, lease_expires_at > now() AS leased "
                "FROM scan_projection_outbox WHERE execution_id = :e"
            ),
            {"e": execution_id},
        ).one()


def make_due(execution_id: int | None = None) -> None:
    """End a backoff wait now (tests do not sleep through exponential backoff)."""
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_projection_outbox SET available_at = now() "
                "WHERE processed_at IS NULL AND (CAST(:e AS bigint) IS NULL OR execution_id = :e)"
            ),
            {"e": execution_id},
        )


def expire_lease(execution_id: int) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_projection_outbox SET lease_expires_at = now() - interval '1 second' "
                "WHERE execution_id = :e AND claim_token IS NOT NULL"
            ),
            {"e": execution_id},
        )


def run_one_slice(
    worker: ProjectionWorker,
    *,
    stopping: threading.Event | None = None,
    cancelled: threading.Event | None = None,
) -> SliceOutcome | None:
    claim = worker.claim()
    if claim is None:
        return None
    return worker.run_slice(
        claim, stopping=stopping or threading.Event(), cancelled=cancelled or threading.Event()
    )


def drain(worker: ProjectionWorker, *, limit: int = 10_000) -> list[SliceOutcome]:
    """Run slices until nothing is due (rows waiting out a backoff stay waiting)."""
    outcomes = []
    for _ in range(limit):
        outcome = run_one_slice(worker)
        if outcome is None:
            return outcomes
        outcomes.append(outcome)
    raise AssertionError("the outbox did not drain")
