"""`netmap runner`: a supervisor process and N worker processes (RUN-1, RUN-2).

Workers are started with the ``spawn`` method, so each builds its own engine
and pool (nothing inherited from the supervisor). Each worker polls the job
kinds in turn; when none had work it sleeps with exponential backoff on the
stop event, so an idle runner costs almost nothing and wakes at once on
shutdown.

Shutdown (SIGTERM/SIGINT to the supervisor): the supervisor sends SIGTERM to
each worker, which stops claiming and finishes its current unit; after
``shutdown_timeout_seconds`` it sends SIGUSR1, which sets the worker's cancel
event so job code abandons work; stragglers are killed after a short grace.
Work that was cut short keeps its lease in PostgreSQL and is recovered when the
lease expires. A worker that dies is replaced (with backoff if it keeps dying).
Several runner instances coordinate only through the database.

Supervisor and workers share no locks: the requests travel as signals, which a
worker's handler turns into a flag. (Shared ``multiprocessing`` events are not
safe here: a worker SIGKILLed inside ``Event.wait`` leaves the event's lock or
sleeper count behind, and the next ``set()`` in any process blocks forever.)
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import wait as wait_for_sentinels
from typing import Any

from app.config import Settings
from app.observability import configure_logging, describe_error, emit, span

CANCEL_GRACE_SECONDS = 5.0
IDLE_BACKOFF_START_SECONDS = 0.05
HEALTHY_UPTIME_SECONDS = 60.0
CANCEL_SIGNAL = signal.SIGUSR1
BRIDGE_POLL_SECONDS = 0.1


_term_requested = False
_cancel_requested = False


def _request_term(*_: Any) -> None:
    # Signal handlers only set a flag: taking an Event's lock here could deadlock
    # against the interrupted main thread. The bridge thread turns it into an event.
    global _term_requested
    _term_requested = True


def _request_cancel(*_: Any) -> None:
    global _cancel_requested
    _cancel_requested = True


def worker_main(worker_id: int, settings: Settings, database_url: str) -> None:
    """Entry point of one worker process."""
    configure_logging()
    # Ctrl-C reaches the whole process group; the supervisor decides what it means.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _request_term)
    signal.signal(CANCEL_SIGNAL, _request_cancel)

    from app import db
    from jobs.base import JobContext
    from jobs.registry import job_kinds, worker_services

    db.set_engine(
        db.create_engine(
            database_url, settings.database, application_name=f"netmap-runner-{worker_id}"
        )
    )
    local_stop, local_cancel = threading.Event(), threading.Event()
    _bridge_signals(local_stop, local_cancel)
    ctx = JobContext(
        settings=settings, worker_id=worker_id, stopping=local_stop, cancelled=local_cancel
    )
    services = worker_services(settings)
    for service in services:
        service.start(ctx)
    kinds = job_kinds(settings)
    emit("RunnerWorkerStarted", worker_id=worker_id, job_kinds=[k.name for k in kinds])
    backoff = IDLE_BACKOFF_START_SECONDS
    try:
        while not local_stop.is_set():
            did_work = False
            for kind in kinds:
                if local_stop.is_set():
                    break
                did_work |= _run_one(ctx, kind)
            if did_work:
                backoff = IDLE_BACKOFF_START_SECONDS
            else:
                local_stop.wait(backoff)
                backoff = min(backoff * 2, settings.runner.idle_backoff_max_seconds)
    finally:
        for service in reversed(services):
            try:
                service.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                emit("WorkerServiceStopFailed", level=logging.ERROR, error=type(exc).__name__)
        db.dispose_engine()
        emit("RunnerWorkerStopped", worker_id=worker_id)


def _run_one(ctx: Any, kind: Any) -> bool:
    from jobs.base import Cancelled

    with span(job=kind.name, worker_id=ctx.worker_id):
        try:
            work = kind.claim(ctx)
        except Exception as exc:  # noqa: BLE001 - one failing kind must not stop the others
            emit(
                "JobClaimFailed",
                level=logging.ERROR,
                job=kind.name,
                error=describe_error(exc)[:500],
            )
            return False
        if work is None:
            return False
        try:
            kind.run(ctx, work)
        except Cancelled:
            emit("JobCancelled", level=logging.WARNING, job=kind.name)
        except Exception as exc:
            logging.getLogger("netmap.runner").error(
                "job failed",
                exc_info=exc,
                extra={
                    "netmap_event": "JobFailed",
                    "netmap_fields": {"job": kind.name, "error": type(exc).__name__},
                },
            )
        return True


def _bridge_signals(local_stop: threading.Event, local_cancel: threading.Event) -> None:
    """Turn the signal flags and the loss of the supervisor into local events."""
    parent = os.getppid()

    def bridge() -> None:
        while True:
            if _cancel_requested:
                local_stop.set()
                local_cancel.set()
                return
            if not local_stop.is_set():
                if _term_requested:
                    local_stop.set()
                elif os.getppid() != parent:
                    emit("RunnerSupervisorLost", level=logging.WARNING)
                    local_stop.set()
                    local_cancel.set()
                    return
            time.sleep(BRIDGE_POLL_SECONDS)

    threading.Thread(target=bridge, name="runner-signal-bridge", daemon=True).start()


class Supervisor:
    def __init__(self, settings: Settings, database_url: str, processes: int):
        self.settings = settings
        self.database_url = database_url
        self.processes = processes
        self.mp = multiprocessing.get_context("spawn")
        self.workers: dict[int, Any] = {}
        self.started_at: dict[int, float] = {}
        self.restart_delay: dict[int, float] = {}
        self.restart_not_before: dict[int, float] = {}
        self._signals = 0
        self._last_signal = 0

    def _start_worker(self, worker_id: int) -> None:
        process = self.mp.Process(
            target=worker_main,
            args=(worker_id, self.settings, self.database_url),
            name=f"netmap-runner-worker-{worker_id}",
        )
        process.start()
        self.workers[worker_id] = process
        self.started_at[worker_id] = time.monotonic()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        # Only a counter: the main loop (which polls it) signals the workers.
        self._signals += 1
        self._last_signal = signum

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        for worker_id in range(self.processes):
            self._start_worker(worker_id)
        emit("RunnerStarted", processes=self.processes, pid=os.getpid())
        while not self._signals:
            sentinels = [p.sentinel for p in self.workers.values() if p.is_alive()]
            if sentinels:
                wait_for_sentinels(sentinels, timeout=0.25)
            else:
                time.sleep(0.25)
            if self._signals:
                break
            self._replace_dead_workers()
        emit("RunnerShutdownRequested", signal=signal.Signals(self._last_signal).name)
        self._signal_workers(signal.SIGTERM)
        return self._shutdown()

    def _signal_workers(self, signum: int) -> None:
        for process in self.workers.values():
            if process.is_alive() and process.pid is not None:
                try:
                    os.kill(process.pid, signum)
                except ProcessLookupError:
                    pass  # it just ended

    def _replace_dead_workers(self) -> None:
        now = time.monotonic()
        base = self.settings.runner.worker_restart_backoff_seconds
        for worker_id, process in list(self.workers.items()):
            if process.is_alive():
                continue
            if worker_id not in self.restart_not_before:
                process.join(timeout=0)
                uptime = now - self.started_at.get(worker_id, now)
                delay = self.restart_delay.get(worker_id, base)
                delay = base if uptime > HEALTHY_UPTIME_SECONDS else min(delay * 2, 60.0)
                self.restart_delay[worker_id] = delay
                self.restart_not_before[worker_id] = now + delay
                emit(
                    "RunnerWorkerDied",
                    level=logging.ERROR,
                    worker_id=worker_id,
                    exitcode=process.exitcode,
                    uptime_s=round(uptime, 1),
                    restart_in_s=delay,
                )
            elif now >= self.restart_not_before[worker_id]:
                del self.restart_not_before[worker_id]
                self._start_worker(worker_id)
                emit("RunnerWorkerReplaced", worker_id=worker_id, pid=self.workers[worker_id].pid)

    def _shutdown(self) -> int:
        timeout = self.settings.runner.shutdown_timeout_seconds
        deadline = time.monotonic() + timeout
        # Poll so a second signal can cut the wait short.
        while time.monotonic() < deadline and self._signals < 2:
            if not any(p.is_alive() for p in self.workers.values()):
                break
            alive = [p.sentinel for p in self.workers.values() if p.is_alive()]
            wait_for_sentinels(alive, timeout=min(0.25, max(0.0, deadline - time.monotonic())))
        if any(p.is_alive() for p in self.workers.values()):
            emit("RunnerShutdownTimeout", level=logging.WARNING, timeout_s=timeout)
            self._signal_workers(CANCEL_SIGNAL)
            grace = time.monotonic() + CANCEL_GRACE_SECONDS
            for process in self.workers.values():
                process.join(timeout=max(0.0, grace - time.monotonic()))
        killed = 0
        for process in self.workers.values():
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
                killed += 1
        emit("RunnerStopped", killed_workers=killed)
        return 0


def run_runner(settings: Settings, database_url: str, processes: int | None = None) -> int:
    configure_logging()
    return Supervisor(settings, database_url, processes or settings.runner.processes).run()
