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

Supervision (after gunicorn's arbiter): each worker beats a heartbeat file the
supervisor created for it — touching its mtime from the job loop, while idle,
and whenever job code looks at the cancel event — and marks it ``ready`` once it
has booted. A worker silent for ``[runner] worker_timeout`` is killed and
replaced (``RunnerWorkerHung``). A worker that dies before it was ready is a
boot failure; ``[runner] boot_failure_limit`` of them in a row (a bad deploy, an
import error, an unreachable database at start) stop the runner with exit code
3 and a clear message instead of respawning forever.

Supervisor and workers share no locks: the requests travel as signals, which a
worker's handler turns into a flag. (Shared ``multiprocessing`` events are not
safe here: a worker SIGKILLed inside ``Event.wait`` leaves the event's lock or
sleeper count behind, and the next ``set()`` in any process blocks forever.)
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import wait as wait_for_sentinels
from pathlib import Path
from typing import Any

from app.config import ConfigError, Settings
from app.observability import configure_logging, describe_error, emit, span

CANCEL_GRACE_SECONDS = 5.0
IDLE_BACKOFF_START_SECONDS = 0.05
HEALTHY_UPTIME_SECONDS = 60.0
CANCEL_SIGNAL = signal.SIGUSR1
BRIDGE_POLL_SECONDS = 0.1


BOOT_FAILURE_EXIT_CODE = 3
BOOT_GRACE_SECONDS = 60.0
READY = b"ready"


class Heartbeat:
    """The worker's side of supervision: touch a file the supervisor watches.

    A file (not a pipe or a shared event) because a worker killed at any instant
    leaves nothing half-held behind, and the supervisor only reads an mtime.
    """

    def __init__(self, path: str | os.PathLike[str], interval_seconds: float):
        self.path = os.fspath(path)
        self.interval_seconds = interval_seconds
        self._last = 0.0

    def beat(self) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval_seconds:
            self._last = now
            try:
                os.utime(self.path)
            except OSError:
                pass  # the supervisor removed its directory: it is going away

    def ready(self) -> None:
        """Booted: from now on a death is an ordinary crash, not a boot failure."""
        try:
            with open(self.path, "wb") as handle:
                handle.write(READY)
        except OSError:
            pass
        self._last = time.monotonic()


class BeatingEvent:
    """The cancel event as job code sees it: every look at it is also a heartbeat.

    Long-running job code already checks for cancellation between units of work
    (the projection's lease guard does several times a second), so a job that
    keeps looking is alive, and one stuck in a call that never returns is not.
    """

    def __init__(self, event: threading.Event, heartbeat: Heartbeat):
        self._event = event
        self._heartbeat = heartbeat

    def is_set(self) -> bool:
        self._heartbeat.beat()
        return self._event.is_set()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self._heartbeat.beat()
            step = self._heartbeat.interval_seconds
            if end is not None:
                step = min(step, end - time.monotonic())
                if step <= 0:
                    return self._event.is_set()
            if self._event.wait(step):
                return True


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


def worker_main(
    worker_id: int, settings: Settings, database_url: str, heartbeat_path: str | None = None
) -> None:
    """Entry point of one worker process."""
    configure_logging()
    # Ctrl-C reaches the whole process group; the supervisor decides what it means.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _request_term)
    signal.signal(CANCEL_SIGNAL, _request_cancel)

    from app import db
    from app.heap import settle_heap
    from jobs.base import JobContext
    from jobs.registry import job_kinds, worker_services

    db.set_engine(
        db.create_engine(
            database_url, settings.database, application_name=f"netmap-runner-{worker_id}"
        )
    )
    heartbeat = Heartbeat(heartbeat_path or os.devnull, settings.runner.heartbeat_seconds)
    local_stop, local_cancel = threading.Event(), threading.Event()
    _bridge_signals(local_stop, local_cancel)
    ctx = JobContext(
        settings=settings,
        worker_id=worker_id,
        stopping=local_stop,
        cancelled=BeatingEvent(local_cancel, heartbeat),
        heartbeat=heartbeat.beat,
    )
    services = worker_services(settings)
    for service in services:
        service.start(ctx)
    kinds = job_kinds(settings)
    settle_heap()  # booted: keep the collector off what lives as long as the worker
    if heartbeat_path:
        heartbeat.ready()
    emit("RunnerWorkerStarted", worker_id=worker_id, job_kinds=[k.name for k in kinds])
    backoff = IDLE_BACKOFF_START_SECONDS
    try:
        while not local_stop.is_set():
            did_work = False
            for kind in kinds:
                if local_stop.is_set():
                    break
                heartbeat.beat()
                did_work |= _run_one(ctx, kind)
            heartbeat.beat()
            if did_work:
                backoff = IDLE_BACKOFF_START_SECONDS
            else:
                _idle(local_stop, backoff, heartbeat)
                backoff = min(backoff * 2, settings.runner.idle_backoff_max_seconds)
    finally:
        for service in reversed(services):
            try:
                service.stop()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                emit("WorkerServiceStopFailed", level=logging.ERROR, error=type(exc).__name__)
        db.dispose_engine()
        emit("RunnerWorkerStopped", worker_id=worker_id)


def _idle(stop: threading.Event, seconds: float, heartbeat: Heartbeat) -> None:
    """Sleep on the stop event, beating at least every heartbeat interval."""
    deadline = time.monotonic() + seconds
    while not stop.is_set():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        stop.wait(min(remaining, heartbeat.interval_seconds))
        heartbeat.beat()


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
    def __init__(
        self,
        settings: Settings,
        database_url: str,
        processes: int,
        *,
        worker_target: Callable[..., None] = worker_main,
    ):
        self.settings = settings
        self.database_url = database_url
        self.processes = processes
        # Tests pass a misbehaving worker (one that hangs, one that cannot be imported).
        self.worker_target = worker_target
        self.mp = multiprocessing.get_context("spawn")
        self.workers: dict[int, Any] = {}
        self.started_at: dict[int, float] = {}
        self.restart_delay: dict[int, float] = {}
        self.restart_not_before: dict[int, float] = {}
        self.heartbeat_dir = Path(tempfile.mkdtemp(prefix="netmap-runner-"))
        self.ready: set[int] = set()
        self.hung: set[int] = set()
        self.boot_failures = 0
        self.halt_reason: str | None = None
        self._signals = 0
        self._last_signal = 0

    def _heartbeat_path(self, worker_id: int) -> Path:
        return self.heartbeat_dir / f"worker-{worker_id}"

    def _start_worker(self, worker_id: int) -> None:
        path = self._heartbeat_path(worker_id)
        path.write_bytes(b"booting")  # a fresh file: the boot counts as a beat
        self.ready.discard(worker_id)
        self.hung.discard(worker_id)
        process = self.mp.Process(
            target=self.worker_target,
            args=(worker_id, self.settings, self.database_url, str(path)),
            name=f"netmap-runner-worker-{worker_id}",
        )
        process.start()
        self.workers[worker_id] = process
        self.started_at[worker_id] = time.monotonic()

    def _watch_heartbeats(self) -> None:
        """Note workers that finished booting; kill those silent for worker_timeout."""
        now = time.time()
        for worker_id, process in self.workers.items():
            if not process.is_alive() or worker_id in self.hung:
                continue
            path = self._heartbeat_path(worker_id)
            try:
                silent = now - path.stat().st_mtime
                if worker_id not in self.ready and path.read_bytes() == READY:
                    self.ready.add(worker_id)
                    self.boot_failures = 0
            except OSError:
                continue
            # Booting (spawn, imports, first connection) may take longer than a beat on a
            # loaded host; a worker that never gets ready is caught by BOOT_GRACE_SECONDS.
            timeout = self.settings.runner.worker_timeout
            if worker_id not in self.ready:
                timeout = max(timeout, BOOT_GRACE_SECONDS)
            if silent > timeout:
                self.hung.add(worker_id)
                emit(
                    "RunnerWorkerHung",
                    level=logging.ERROR,
                    worker_id=worker_id,
                    worker_pid=process.pid,
                    silent_s=round(silent, 1),
                    worker_timeout_s=timeout,
                    booted=worker_id in self.ready,
                )
                try:
                    os.kill(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

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
        try:
            while not self._signals and self.halt_reason is None:
                sentinels = [p.sentinel for p in self.workers.values() if p.is_alive()]
                if sentinels:
                    wait_for_sentinels(sentinels, timeout=0.25)
                else:
                    time.sleep(0.25)
                if self._signals:
                    break
                self._watch_heartbeats()
                self._replace_dead_workers()
            if self.halt_reason is not None:
                emit("RunnerHalted", level=logging.CRITICAL, reason=self.halt_reason)
                sys.stderr.write(f"netmap runner: stopping: {self.halt_reason}\n")
            else:
                emit("RunnerShutdownRequested", signal=signal.Signals(self._last_signal).name)
            self._signal_workers(signal.SIGTERM)
            code = self._shutdown()
        finally:
            shutil.rmtree(self.heartbeat_dir, ignore_errors=True)
        return BOOT_FAILURE_EXIT_CODE if self.halt_reason is not None else code

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
                self._watch_heartbeats()  # a worker may have become ready just before dying
                if worker_id not in self.ready:
                    self._boot_failed(worker_id, process.exitcode)
                    if self.halt_reason is not None:
                        return
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
                    hung=worker_id in self.hung,
                )
            elif now >= self.restart_not_before[worker_id]:
                del self.restart_not_before[worker_id]
                self._start_worker(worker_id)
                emit("RunnerWorkerReplaced", worker_id=worker_id, pid=self.workers[worker_id].pid)

    def _boot_failed(self, worker_id: int, exitcode: int | None) -> None:
        self.boot_failures += 1
        limit = self.settings.runner.boot_failure_limit
        emit(
            "RunnerWorkerBootFailed",
            level=logging.ERROR,
            worker_id=worker_id,
            exitcode=exitcode,
            consecutive=self.boot_failures,
            limit=limit,
        )
        if self.boot_failures >= limit:
            self.halt_reason = (
                f"workers died while booting {self.boot_failures} times in a row "
                f"(runner.boot_failure_limit = {limit}; last exit code {exitcode}); "
                "see the worker's error output above (import error, bad configuration "
                "or an unreachable database)"
            )

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
    from app.ops.config_check import emit_check, full_check

    check = full_check(settings)
    emit_check(check, "runner")
    if not check.ok:
        sys.stderr.write(f"netmap runner: {ConfigError(check)}\n")
        return 2
    return Supervisor(settings, database_url, processes or settings.runner.processes).run()
