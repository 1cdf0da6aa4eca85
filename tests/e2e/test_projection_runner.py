"""The projection in real runner processes: kill -9, two runners, SIGSTOP, SIGTERM (PRJ, RUN).

Leases here are the shortest the configuration allows (10 s, heartbeat 3 s), so
each recovery waits for a real lease expiry. The Elasticsearch side is the
protocol simulator in this process; the PostgreSQL store is the real database.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import uuid

import pytest

from app.config import load_settings
from app.projection import outbox
from app.projection.pages import publish_page
from app.projection.slices import ProjectionWorker
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.postgres_store import PostgresStore
from tests.support.es_simulator import EsSimulator, Fault
from tests.support.es_target import drop_prefix
from tests.support.processes import (
    LoggedProcess,
    base_env,
    netmap_command,
    wait_for,
    worker_pids,
)
from tests.support.projection import (
    expected_current,
    outbox_row,
    seed_execution,
    stored_current,
)

pytestmark = pytest.mark.e2e

LEASE = 10
HEARTBEAT = 3


@pytest.fixture
def simulator():
    with EsSimulator() as sim:
        yield sim


@pytest.fixture
def es_env(simulator):
    prefix = f"nmp-{uuid.uuid4().hex[:10]}"
    values = {
        "url": simulator.url,
        "index_prefix": prefix,
        "index_replicas": 0,
        "request_timeout_seconds": 60,
        "bulk_retry_backoff_ms": 10,
        "bulk_max_concurrency": 1,
        "projection_page_size": 10,
        "bulk_batch_size": 20,
        "projection_pages_per_tick": 4,
        "projection_lease_seconds": LEASE,
        "projection_heartbeat_seconds": HEARTBEAT,
        "projection_retry_base_seconds": 0.2,
    }
    settings, _ = load_settings(env={}, overrides={"elasticsearch": values})
    store = ElasticsearchStore(settings.elasticsearch)
    store.ensure_schema()
    yield values, settings, store
    store.close()
    drop_prefix(simulator.url, settings.elasticsearch)


def _env(database_url: str, elasticsearch: dict, **extra: str) -> dict[str, str]:
    env = {
        "NETMAP_DATABASE_URL": database_url,
        "NETMAP_RUNNER_IDLE_BACKOFF_MAX_SECONDS": "0.2",
        "NETMAP_RUNNER_WORKER_RESTART_BACKOFF_SECONDS": "0.2",
        "NETMAP_RUNNER_EXECUTION_RECOVERY_INTERVAL_SECONDS": "60",
    }
    for key, value in elasticsearch.items():
        env[f"NETMAP_ELASTICSEARCH_{key.upper()}"] = str(value)
    if elasticsearch.get("url"):
        # With a cluster the deployment's bulk budget is required (STO-4); this one fits the
        # test's few processes.
        env.setdefault("NETMAP_ELASTICSEARCH_BULK_MAX_CONCURRENCY_TOTAL", "64")
    env.update(extra)
    return base_env(**env)


def _runner(env, tmp_path, name="runner", processes=1) -> LoggedProcess:
    return LoggedProcess(
        netmap_command("runner", "--processes", str(processes)), env, tmp_path, name
    )


def _worker_pid(runner: LoggedProcess) -> int:
    def only_worker():
        children = worker_pids(runner)
        return next(iter(children)) if len(children) == 1 else None

    return wait_for(only_worker, 60, "the runner's worker process")


def _stop(runner: LoggedProcess) -> int | None:
    return runner.stop(timeout=40)  # SIGTERM, then SIGKILL after the timeout


def _events(runner: LoggedProcess, name: str, **match) -> list[dict]:
    return [e for e in runner.events(name) if all(e.get(k) == v for k, v in match.items())]


def test_a_worker_killed_mid_page_is_finished_by_another_after_the_lease(
    database_url, engine, tmp_path, simulator, es_env
):
    values, _settings, store = es_env
    execution_id, docs = seed_execution(store, 60)
    stuck = simulator.inject(Fault(action="delay", endpoint="_bulk", nth=3, seconds=20))
    runner = _runner(_env(database_url, values), tmp_path)
    try:
        victim = _worker_pid(runner)
        wait_for(lambda: stuck.fired and simulator.cluster.in_flight.get("_bulk"), 60, "page 3")
        saved = outbox_row(execution_id)
        assert saved.processed_endpoints == 20 and saved.leased  # two pages in, third running
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: runner.events("RunnerWorkerReplaced"), 30, "a replacement worker")
        done = wait_for(
            lambda: (row := outbox_row(execution_id)).processed_at is not None and row,
            LEASE * 4,
            "the replacement to finish after the lease expired",
        )
        assert done.processed_endpoints == 60 and done.claim_token is None
        claims = _events(runner, "ScanProjectionClaimed", execution_id=execution_id)
        recovered = [c for c in claims if c["recovered"]]
        assert [c["processed_endpoints"] for c in recovered] == [20]  # resumed at the checkpoint
        assert stored_current(store, [docs[0].owner_id]) == expected_current([docs])
        # The SIGKILL left nothing shared behind that could hang the others' shutdown.
        runner.process.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=30) == 0
        assert not runner.events("RunnerShutdownTimeout")
        assert runner.events("RunnerStopped")[0]["killed_workers"] == 0
    finally:
        _stop(runner)


def test_two_runner_instances_publish_everything_exactly_once_in_effect(
    database_url, engine, settings, tmp_path
):
    store = PostgresStore(settings)
    executions = {}
    owner_docs = []
    for n in range(6):
        execution_id, docs = seed_execution(store, 40, first_ip=n * 13)
        executions[execution_id] = docs
        owner_docs.append(docs[0].owner_id)
    values = {
        "projection_page_size": 10,
        "projection_pages_per_tick": 1,
        "projection_lease_seconds": LEASE,
        "projection_heartbeat_seconds": HEARTBEAT,
    }
    runners = [
        _runner(_env(database_url, values), tmp_path, name=f"runner-{n}", processes=2)
        for n in range(2)
    ]
    try:
        wait_for(
            lambda: all(outbox_row(e).processed_at is not None for e in executions),
            120,
            "every execution published",
        )
    finally:
        for runner in runners:
            assert _stop(runner) == 0
    for execution_id in executions:
        pages = [
            e["page_endpoints"]
            for r in runners
            for e in _events(r, "ScanProjectionPageCompleted", execution_id=execution_id)
        ]
        completed = [
            e
            for r in runners
            for e in _events(r, "ScanProjectionCompleted", execution_id=execution_id)
        ]
        assert sum(pages) == 40 and len(pages) == 4  # every page once, none twice
        assert len(completed) == 1
        assert outbox_row(execution_id).processed_endpoints == 40
    assert stored_current(store, owner_docs) == expected_current(list(executions.values()))
    store.close()


def test_a_paused_worker_cannot_write_after_a_new_owner_took_over(
    database_url, engine, tmp_path, simulator, es_env
):
    values, settings, store = es_env
    execution_id, docs = seed_execution(store, 30)
    # The worker is paused inside this request, which answers only after the worker has
    # been resumed: its heartbeat (due long ago) runs first, then the checkpoint.
    slow = simulator.inject(Fault(action="delay", endpoint="_bulk", seconds=LEASE + 12))
    runner = _runner(_env(database_url, values), tmp_path)
    worker_pid = _worker_pid(runner)
    try:
        wait_for(lambda: slow.fired and simulator.cluster.in_flight.get("_bulk"), 60, "page 1")
        os.kill(worker_pid, signal.SIGSTOP)
        wait_for(lambda: not outbox_row(execution_id).leased, LEASE * 3, "the lease to expire")

        # A new owner (this test) takes over, publishes page 1 and checkpoints it.
        claim = outbox.claim_next(lease_seconds=60)
        assert claim.execution_id == execution_id and claim.recovered
        page = publish_page(
            store,
            execution_id,
            after_id=None,
            settings=settings.elasticsearch,
            cancel=threading.Event(),
        )
        page.raise_for_failures()
        assert outbox.checkpoint(claim, cursor=page.last_id, processed=10, phase="pages")

        os.kill(worker_pid, signal.SIGCONT)
        wait_for(
            lambda: _events(runner, "ScanProjectionOutboxError", operation="checkpoint"),
            LEASE * 3,
            "the paused worker's checkpoint to be refused",
        )
        heartbeat = _events(runner, "ScanProjectionOutboxError", operation="heartbeat")
        assert [e["error"] for e in heartbeat] == ["lease_lost"]
        # The old worker's late writes changed nothing that is ours.
        row = outbox_row(execution_id)
        assert (row.claim_token, row.cursor, row.processed_endpoints) == (
            claim.claim_token,
            page.last_id,
            10,
        )
    finally:
        os.kill(worker_pid, signal.SIGCONT)
        assert _stop(runner) == 0
    # In its whole life the paused worker sent one bulk request: the one it was paused in.
    assert len(runner.events("ElasticsearchBulkCompleted")) == 1

    resumed = dataclasses.replace(claim, cursor=page.last_id, processed_endpoints=10)
    outcome = ProjectionWorker(settings, store).run_slice(
        resumed, stopping=threading.Event(), cancelled=threading.Event()
    )
    assert outcome.result == "completed"
    assert outbox_row(execution_id).processed_endpoints == 30
    assert stored_current(store, [docs[0].owner_id]) == expected_current([docs])


def test_sigterm_with_a_page_past_the_shutdown_timeout_leaves_a_recoverable_row(
    database_url, engine, tmp_path, simulator, es_env
):
    values, _settings, store = es_env
    execution_id, docs = seed_execution(store, 30)
    slow = simulator.inject(Fault(action="delay", endpoint="_bulk", nth=2, seconds=30))
    env = _env(database_url, values, NETMAP_RUNNER_SHUTDOWN_TIMEOUT_SECONDS="1")
    first = _runner(env, tmp_path, name="first", processes=2)
    try:
        wait_for(lambda: slow.fired and simulator.cluster.in_flight.get("_bulk"), 60, "page 2")
        # The idle worker dies by SIGKILL first: nothing it shared may hang the shutdown's
        # cancel step that follows.
        busy = _events(first, "ScanProjectionClaimed", execution_id=execution_id)[0]["pid"]
        idle = next(pid for pid in worker_pids(first) if pid != busy)
        os.kill(idle, signal.SIGKILL)
        wait_for(lambda: first.events("RunnerWorkerReplaced"), 30, "a replacement worker")
        first.process.send_signal(signal.SIGTERM)
        assert first.wait(timeout=60) == 0
    finally:
        first.stop()
    assert first.events("RunnerShutdownTimeout")
    assert first.events("RunnerStopped")[0]["killed_workers"] == 1
    left = outbox_row(execution_id)
    assert left.processed_at is None and left.processed_endpoints == 10
    assert left.claim_token is not None  # the killed worker could not hand it back

    second = _runner(env, tmp_path, name="second")
    try:
        done = wait_for(
            lambda: (row := outbox_row(execution_id)).processed_at is not None and row,
            LEASE * 4,
            "another runner to finish the row after the lease expired",
        )
    finally:
        assert _stop(second) == 0
    assert done.processed_endpoints == 30
    claimed = _events(second, "ScanProjectionClaimed", execution_id=execution_id)
    assert claimed[0]["recovered"] is True and claimed[0]["processed_endpoints"] == 10
    assert stored_current(store, [docs[0].owner_id]) == expected_current([docs])
