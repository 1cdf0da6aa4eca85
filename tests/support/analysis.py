"""Change-analysis tests: scans as a final leaves them, then projection and analysis run.

``Scans.scan`` creates what a succeeded (or failed) execution's final leaves
behind without HTTP: the task and execution with their targets, ports and
finish time, the execution endpoints in the store, the projection-outbox row
and the analysis-queue row. ``settle`` drains the projection and the analysis
with the real workers; ``open_set`` / ``assets`` read what the store says.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from app.alerts.evaluate import change_set_hook
from app.alerts.searched_changes import follow_up
from app.analysis.worker import AnalysisOutcome, AnalysisWorker
from app.config import Settings
from app.db import transaction
from app.projection.slices import ProjectionWorker
from app.search.port import AssetQuery, SearchStore, StorageScope
from tests.support.projection import create_owner, drain
from tests.support.search_documents import BASE_TIME, execution_endpoint

_names = itertools.count(1)

Endpoint = tuple[str, int] | tuple[str, int, str] | tuple[str, int, str, dict[str, Any]]


def _parts(endpoint: Endpoint) -> tuple[str, int, str, dict[str, Any]]:
    ip, port = endpoint[0], endpoint[1]
    transport = endpoint[2] if len(endpoint) > 2 else "tcp"  # type: ignore[misc]
    fields = endpoint[3] if len(endpoint) > 3 else {}  # type: ignore[misc]
    return ip, port, transport, dict(fields)


@dataclass
class Scans:
    settings: Settings
    store: SearchStore
    clock: datetime = BASE_TIME

    def owner(self) -> int:
        return create_owner()

    def scan(
        self,
        owner_id: int,
        targets: Sequence[str],
        endpoints: Iterable[Endpoint],
        *,
        ports: str = "1-65535",
        transports: Sequence[str] = ("tcp",),
        status: str = "succeeded",
        kind: str = "ports",
        finished_at: datetime | None = None,
        queued: bool = True,
        task_id: int | None = None,
    ) -> int:
        """One finished execution (another run of ``task_id`` when given, else of a new
        task); the clock moves a minute per scan unless told the time."""
        if finished_at is None:
            self.clock += timedelta(minutes=1)
            finished_at = self.clock
        with transaction() as conn:
            if task_id is None:
                task_id = conn.execute(
                    sa.text(
                        "INSERT INTO scan_tasks (owner_id, name, targets, ports, transports, "
                        "scan_plan, status) VALUES (:o, :n, CAST(:targets AS jsonb), :ports, "
                        ":transports, '{}', :status) RETURNING id"
                    ),
                    {
                        "o": owner_id,
                        "n": f"scan-{next(_names)}",
                        "targets": json.dumps(list(targets)),
                        "ports": ports,
                        "transports": list(transports),
                        "status": "succeeded" if status == "succeeded" else "failed",
                    },
                ).scalar_one()
            execution_id = conn.execute(
                sa.text(
                    "INSERT INTO scan_executions (task_id, kind, status, targets, ports, "
                    "transports, finished_at) VALUES (:t, :kind, :s, CAST(:targets AS jsonb), "
                    ":ports, :transports, :f) RETURNING id"
                ),
                {
                    "t": task_id,
                    "kind": kind,
                    "s": status,
                    "targets": json.dumps(list(targets)),
                    "ports": ports,
                    "transports": list(transports),
                    "f": finished_at,
                },
            ).scalar_one()
        docs = []
        for endpoint in endpoints:
            ip, port, transport, fields = _parts(endpoint)
            fields.setdefault("service", "svc")
            docs.append(
                execution_endpoint(
                    execution_id,
                    ip,
                    port,
                    transport,
                    task_id=task_id,
                    owner_id=owner_id,
                    seen=finished_at - timedelta(seconds=30),
                    **fields,
                )
            )
        for start in range(0, len(docs), 500):
            self.store.write_execution_endpoints(docs[start : start + 500]).raise_for_failures()
        if docs:
            self.store.refresh(StorageScope(months=(docs[0].first_seen.strftime("%Y.%m"),)))
        with transaction() as conn:
            if kind == "ports" and status == "succeeded":
                conn.execute(
                    sa.text("INSERT INTO scan_projection_outbox (execution_id) VALUES (:e)"),
                    {"e": execution_id},
                )
        if queued:
            self.enqueue(execution_id)
        return execution_id

    def enqueue(self, execution_id: int) -> None:
        """The analysis-queue row a final writes (tests may hold it back: a late commit)."""
        with transaction() as conn:
            conn.execute(
                sa.text(
                    "INSERT INTO scan_analysis_queue (execution_id, task_id) "
                    "SELECT id, task_id FROM scan_executions WHERE id = :e"
                ),
                {"e": execution_id},
            )

    def project(self) -> None:
        drain(ProjectionWorker(self.settings, self.store))
        self.store.refresh_current()

    def analyse(self, worker: AnalysisWorker | None = None) -> list[AnalysisOutcome]:
        worker = worker or AnalysisWorker(
            self.settings,
            self.store,
            on_change_set=change_set_hook(self.settings.alerts, self.store),
            after_change_set=follow_up(self.settings.alerts, self.store),
        )
        outcomes = []
        for _ in range(10_000):
            claim = worker.claim()
            if claim is None:
                self.store.refresh_current()
                return outcomes
            outcomes.append(worker.run(claim))
        raise AssertionError("the analysis queue did not drain")

    def settle(self) -> list[AnalysisOutcome]:
        self.project()
        return self.analyse()

    def assets(
        self, owner_id: int | None, status: str = "all", scope: str = "user"
    ) -> dict[tuple[str, int, str], Any]:
        found = {}
        cursor = None
        while True:
            page = self.store.search_assets(
                AssetQuery(
                    scope=scope,
                    owner_id=owner_id if scope == "user" else None,
                    status=status,
                    limit=500,
                    cursor=cursor,
                )
            )
            for doc in page.items:
                found[(doc.ip, doc.port, doc.transport)] = doc
            cursor = page.next_cursor
            if cursor is None:
                return found

    def open_set(self, owner_id: int) -> set[tuple[str, int, str]]:
        return set(self.assets(owner_id, "open"))

    def gone_set(self, owner_id: int) -> set[tuple[str, int, str]]:
        return set(self.assets(owner_id, "gone"))


def hosts(network: str, count: int, *, start: int = 1) -> list[str]:
    """``hosts("10.0.0.0/28", 3)`` → 10.0.0.1 .. 10.0.0.3."""
    prefix = network.split("/")[0].rsplit(".", 1)[0]
    base = int(network.split("/")[0].rsplit(".", 1)[1])
    return [f"{prefix}.{base + n}" for n in range(start, start + count)]


def changes_of(execution_id: int) -> list[Any]:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT kind, host(ip) AS ip, port, transport, old_service, new_service "
                "FROM analysis_changes WHERE execution_id = :e ORDER BY id"
            ),
            {"e": execution_id},
        ).all()


def summary_of(execution_id: int) -> Any:
    with transaction() as conn:
        return conn.execute(
            sa.text("SELECT * FROM analysis_execution_summaries WHERE execution_id = :e"),
            {"e": execution_id},
        ).one_or_none()
