"""Job kinds: purge deleted tasks, and the runs beyond ``[scan] keep_runs`` (issue 33).

``TaskPurgeJob`` claims a ``task_purges`` row (``app.scan_control.purge``) and works
through its phases in bounded batches under the lease kit's heartbeat and guard; each
batch ends with a checkpoint that repeats the token and the lease, so a worker that
dies is taken over where it stopped, and a worker that lost its lease writes nothing
more. ``run-retention`` (periodic, one runner at a time) removes the executions of
runs beyond the newest ``keep_runs`` of each task through the same execution batches.
"""

from __future__ import annotations

from app.analysis.purge import forget_endpoints, purge_executions
from app.config import Settings
from app.exports.service import delete_task_exports
from app.leases.guard import LeaseGuard, LeaseLost
from app.leases.heartbeat import Heartbeat
from app.observability import emit
from app.projection import outbox
from app.scan_control import purge
from app.search.port import SearchStore, task_purge
from jobs.base import Cancelled, JobContext, PeriodicJob, PeriodicLease

LEASE_SECONDS = 60.0
ASSET_BATCH = 2000  # execution endpoints looked at per assets batch
EXECUTION_BATCH = 50  # executions per execution batch
ROW_BATCH = 5000  # rows per table and statement inside an execution batch
RETRY_SECONDS = 30.0


def purge_execution_batch(
    store: SearchStore, execution_ids: list[int], check=lambda: None
) -> dict[str, int]:
    """Everything of these executions: store data, analysis rows, then the rows."""
    removed: dict[str, int] = {}
    steps = [lambda: purge_executions(execution_ids, limit=ROW_BATCH)]
    if (purger := task_purge(store)) is not None:
        steps.insert(0, lambda: purger.purge_execution_data(execution_ids, limit=ROW_BATCH))
    for step in steps:  # each until it has nothing left (an empty count)
        check()
        while done := step():
            for key, count in done.items():
                removed[key] = removed.get(key, 0) + count
            check()
    removed["executions"] = purge.delete_executions(execution_ids)
    return removed


class TaskPurgeJob:
    name = "task_purge"

    def __init__(self, settings: Settings, store: SearchStore | None = None):
        """``store``: the search store to purge (by default the one the settings name,
        opened on first use)."""
        self.settings = settings
        self._store: SearchStore | None = store
        self._objects = None

    def store(self) -> SearchStore:
        if self._store is None:
            from app.search import open_store

            self._store = open_store(self.settings)
        return self._store

    def objects(self):
        if self._objects is None:
            from app.object_store import open_object_store

            self._objects = open_object_store(self.settings)
        return self._objects

    def claim(self, ctx: JobContext) -> purge.PurgeClaim | None:
        return purge.claim_next_purge(lease_seconds=LEASE_SECONDS)

    def run(self, ctx: JobContext, work: purge.PurgeClaim) -> None:
        guard = LeaseGuard(
            LEASE_SECONDS, claimed_at=work.claimed_monotonic, runner_cancel=ctx.cancelled
        )
        heartbeat = Heartbeat(
            lambda: purge.PURGE_ROWS.renew(work.task_id, work.claim_token, work.lease_seconds),
            guard,
            interval=LEASE_SECONDS / 3,
            name=f"purge-{work.task_id}",
            failed_event="TaskPurgeHeartbeatFailed",
            event_fields={"task_id": work.task_id},
        )

        def check() -> None:
            ctx.check_cancelled()
            guard.raise_if_lost()

        try:
            with heartbeat:
                self._phases(work, check)
        except (LeaseLost, purge.PurgeLost) as lost:
            emit("TaskPurgeLeaseLost", task_id=work.task_id, error=str(lost))
            if ctx.cancelled.is_set():
                raise Cancelled(f"purge of task {work.task_id} cut short") from None
        except Cancelled:
            raise
        except Exception as exc:  # kept on the row for the retry, then re-raised
            purge.give_up(work, f"{type(exc).__name__}: {exc}", retry_seconds=RETRY_SECONDS)
            raise

    def _phases(self, work: purge.PurgeClaim, check) -> None:
        store = self.store()
        phase, cursor = work.phase, work.cursor
        if phase == "assets" and cursor is None:
            # Nothing more of these executions reaches the asset view; a projection page
            # in flight is waited out (its lease), so the sweep below sees its result.
            in_flight = outbox.discard(purge.all_execution_ids(work.task_ids))
            if in_flight > 0:
                purge.postpone(work, in_flight + 1)
                emit("TaskPurgeWaitsForProjection", task_id=work.task_id, seconds=in_flight)
                return
        if phase == "assets":
            purger = task_purge(store)
            excluded = purge.deleted_task_ids()
            while purger is not None:
                check()
                batch = purger.purge_task_assets(
                    work.task_ids, excluded_task_ids=excluded, after_key=cursor, limit=ASSET_BATCH
                )
                # What left the owner's view leaves the change analysis's memory too, before
                # the checkpoint: a batch retried after a crash names the same endpoints.
                forgotten = forget_endpoints(batch.unseen)
                cursor = batch.last_key if batch.last_key is not None else cursor
                done = batch.endpoints < ASSET_BATCH
                purge.checkpoint(
                    work,
                    phase="executions" if done else "assets",
                    cursor=None if done else cursor,
                    removed={
                        "user_assets": batch.user_assets,
                        "global_assets": batch.global_assets,
                        "analysis_assets": forgotten,
                    },
                )
                if done:
                    break
            if purger is None:
                purge.checkpoint(work, phase="executions", cursor=None, removed={})
            phase = "executions"
        if phase == "executions":
            while True:
                check()
                executions = purge.execution_batch(work.task_ids, limit=EXECUTION_BATCH)
                if not executions:
                    break
                removed = purge_execution_batch(store, executions, check)
                purge.checkpoint(work, phase="executions", cursor=None, removed=removed)
        while True:  # the tasks' exports: objects, then rows
            check()
            removed_exports = delete_task_exports(
                self.settings, self.objects(), list(work.task_ids), limit=EXECUTION_BATCH
            )
            if not removed_exports:
                break
            purge.checkpoint(
                work, phase="executions", cursor=None, removed={"exports": removed_exports}
            )
        check()
        counts = purge.finish(work)
        emit("TaskPurged", task_id=work.task_id, **counts)


def job(settings: Settings) -> TaskPurgeJob:
    return TaskPurgeJob(settings)


def purge_old_runs(settings: Settings, store: SearchStore, check=lambda: None) -> tuple[int, int]:
    """Remove the executions of every task's runs beyond ``[scan] keep_runs``, then those
    runs; returns (runs, executions) removed."""
    removed_runs = removed_executions = 0
    while True:
        check()
        executions, empty_runs = purge.old_run_executions(
            keep_runs=settings.scan.keep_runs, limit=EXECUTION_BATCH
        )
        if empty_runs:
            removed_runs += purge.delete_runs(empty_runs)
        if not executions:
            if not empty_runs:
                break
            continue
        purge_execution_batch(store, executions, check)
        removed_executions += len(executions)
    if removed_runs or removed_executions:
        emit("OldRunsPurged", runs=removed_runs, executions=removed_executions)
    return removed_runs, removed_executions


def retention_job(settings: Settings) -> PeriodicJob:
    store: SearchStore | None = None

    def retain(ctx: JobContext, lease: PeriodicLease) -> None:
        nonlocal store
        if store is None:
            from app.search import open_store

            store = open_store(settings)

        def check() -> None:
            if ctx.stopping.is_set():
                raise Cancelled("runner stopping")
            lease.check()

        purge_old_runs(settings, store, check)

    return PeriodicJob("run-retention", retain, interval_seconds=300, lease_seconds=300)
