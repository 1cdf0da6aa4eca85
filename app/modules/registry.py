"""Generations, leases and hot swap with drain (MOD-2).

``registry.acquire(slot)`` returns a ``Lease`` on the slot's current
generation; ``lease.invoke(method, payload)`` runs on *that* generation even if
another one is installed meanwhile. Installing a generation happens under a
short lock that only moves the route: the candidate was prepared and
self-tested before, outside any lock. The replaced generation drains: it shuts
down only when its leases are released and the work it started has really
ended. It is never closed by force while work is in flight: after
``drain_timeout`` it is reported stuck (event ``ModuleGenerationStuck``, the
``stuck`` flag of ``draining()``, shown by the admin status and counted by the
metrics) and keeps waiting, until its work ends or an admin closes it
explicitly (``close_stuck``). Only the process's own shutdown (``close``) ends
what is left after its timeout.

Each call runs on a worker thread of its generation while the caller waits at
most the slot's wait timeout. A caller that stops waiting gets
``DeadlineExceeded``; its work keeps its place in the slot's capacity and in
the generation's drain until it really finishes, so abandoned work can neither
pile up beyond ``max_in_flight`` nor be cut off by a premature shutdown.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from app.modules.contract import Module, ModuleSlot
from app.modules.errors import ErrorKind, ModuleError, StaleRevision
from app.observability import emit


@dataclass(frozen=True)
class GenerationIdentity:
    slot: str
    release_id: str
    revision: int
    generation: int


class Capacity:
    """Work in flight across all generations of one slot; never blocks, never queues."""

    def __init__(self, limit: int):
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    def try_acquire(self) -> bool:
        with self._lock:
            if self._used >= self.limit:
                return False
            self._used += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._used -= 1

    @property
    def used(self) -> int:
        with self._lock:
            return self._used


class _Job:
    """One call's hand-off between the waiting caller and the worker thread."""

    __slots__ = ("abandoned", "lock", "started")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = False
        self.abandoned = False


class Generation:
    def __init__(
        self, identity: GenerationIdentity, module: Module, slot: ModuleSlot, capacity: Capacity
    ):
        self.identity = identity
        self.module = module
        self.slot = slot
        self.capacity = capacity
        self.leases = 0
        self.in_flight = 0
        self.closed = False
        self.stuck = False  # drained longer than drain_timeout with work in flight
        self.close_requested: str | None = None  # who asked to close it by force
        self._cond = threading.Condition()
        self._executor = ThreadPoolExecutor(
            max_workers=slot.max_in_flight,
            thread_name_prefix=f"module-{identity.slot}-g{identity.generation}",
        )

    def available(self) -> bool:
        return not self.closed and self.module.available()

    def _add_lease(self) -> None:
        with self._cond:
            self.leases += 1

    def _drop_lease(self) -> None:
        with self._cond:
            self.leases -= 1
            self._cond.notify_all()

    def _end_work(self) -> None:
        self.capacity.release()
        with self._cond:
            self.in_flight -= 1
            self._cond.notify_all()

    def run(self, method: str, payload: dict[str, Any], wait_timeout: float) -> dict[str, Any]:
        if self.closed:
            raise ModuleError(
                ErrorKind.UNAVAILABLE, "generation_closed", "generation was shut down"
            )
        if not self.module.available():
            raise ModuleError(
                ErrorKind.UNAVAILABLE, "module_unavailable", "module implementation is not healthy"
            )
        if not self.capacity.try_acquire():
            raise ModuleError(
                ErrorKind.BUSY, "busy", f"{self.slot.max_in_flight} calls already in flight"
            )
        with self._cond:
            self.in_flight += 1
        job = _Job()

        def work() -> dict[str, Any]:
            try:
                with job.lock:
                    if job.abandoned:
                        raise ModuleError(
                            ErrorKind.DEADLINE_EXCEEDED, "abandoned", "caller stopped waiting"
                        )
                    job.started = True
                return self.module.invoke(method, payload)
            finally:
                self._end_work()

        try:
            future = self._executor.submit(work)
        except RuntimeError:  # executor already shut down
            self._end_work()
            raise ModuleError(
                ErrorKind.UNAVAILABLE, "generation_closed", "generation was shut down"
            ) from None
        try:
            return future.result(timeout=wait_timeout)
        except FutureTimeout:
            with job.lock:
                job.abandoned = True
                started = job.started
            raise ModuleError(
                ErrorKind.DEADLINE_EXCEEDED,
                "deadline_exceeded",
                "no result within the wait timeout"
                + ("; the call is still running and keeps its capacity" if started else ""),
            ) from None

    def force_close(self, by: str) -> None:
        """Stop waiting for this generation's work (an admin's explicit close)."""
        with self._cond:
            self.close_requested = by
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._cond:
            while (self.leases > 0 or self.in_flight > 0) and self.close_requested is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def shutdown(self, timeout: float) -> None:
        self.closed = True
        try:
            self.module.shutdown(timeout)
        finally:
            self._executor.shutdown(wait=False)


class Lease:
    """A handle on one generation; release it (or use ``with``) when done."""

    def __init__(self, generation: Generation, slot: ModuleSlot):
        self._generation = generation
        self._slot = slot
        self._released = False

    @property
    def identity(self) -> GenerationIdentity:
        return self._generation.identity

    def invoke(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        if self._released:
            raise RuntimeError("lease already released")
        self._slot.validate_input(method, payload)
        result = self._generation.run(method, payload, self._slot.wait_timeout_seconds)
        self._slot.validate_output(method, payload, result)
        return result

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._generation._drop_lease()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()


class ModuleRegistry:
    def __init__(self, slots: list[ModuleSlot], *, drain_timeout: float):
        self.slots = {slot.name: slot for slot in slots}
        self.drain_timeout = drain_timeout
        self._capacity = {slot.name: Capacity(slot.max_in_flight) for slot in slots}
        self._current: dict[str, Generation | None] = dict.fromkeys(self.slots)
        self._counters = {name: itertools.count(1) for name in self.slots}
        self._route_lock = threading.Lock()
        self._draining: set[Generation] = set()
        self._drainers: list[threading.Thread] = []
        self._closed = False

    def acquire(self, slot: str) -> Lease:
        with self._route_lock:
            generation = self._current[slot]
            if generation is None or self._closed:
                raise ModuleError(
                    ErrorKind.NOT_READY, "not_ready", f"no {slot} implementation is applied"
                )
            generation._add_lease()
        return Lease(generation, self.slots[slot])

    def current(self, slot: str) -> Generation | None:
        with self._route_lock:
            return self._current[slot]

    def accepts(self, slot: str, revision: int) -> bool:
        """Whether ``install`` would take ``revision`` now (the one rule for "newer")."""
        with self._route_lock:
            return _accepts(self._current[slot], revision)

    def capacity_used(self, slot: str) -> int:
        return self._capacity[slot].used

    def install(self, slot: str, module: Module, *, release_id: str, revision: int) -> Generation:
        """Route new leases to ``module``; the previous generation drains in the background.

        Refuses (``StaleRevision``) a revision older than the applied one, and the same
        revision unless the applied generation is unhealthy (crash recovery).
        """
        with self._route_lock:
            if self._closed:
                raise StaleRevision("registry is closed")
            previous = self._current[slot]
            if not _accepts(previous, revision):
                assert previous is not None
                raise StaleRevision(
                    f"revision {revision} is not newer than {previous.identity.revision}"
                )
            identity = GenerationIdentity(
                slot=slot,
                release_id=release_id,
                revision=revision,
                generation=next(self._counters[slot]),
            )
            generation = Generation(identity, module, self.slots[slot], self._capacity[slot])
            self._current[slot] = generation
        emit(
            "ModuleGenerationInstalled",
            slot=slot,
            release_id=release_id,
            revision=revision,
            generation=identity.generation,
            previous_generation=previous.identity.generation if previous else None,
        )
        if previous is not None:
            self._retire(previous)
        return generation

    def _retire(self, generation: Generation) -> None:
        thread = threading.Thread(
            target=self._drain,
            args=(generation,),
            name=f"module-drain-{generation.identity.slot}-g{generation.identity.generation}",
            daemon=True,
        )
        with self._route_lock:
            self._draining.add(generation)
            self._drainers = [t for t in self._drainers if t.is_alive()]
            self._drainers.append(thread)
        thread.start()

    def _drain(self, generation: Generation) -> None:
        started = time.monotonic()
        idle = generation.wait_idle(self.drain_timeout)
        if not idle and generation.close_requested is None:
            generation.stuck = True
            emit(
                "ModuleGenerationStuck",
                level=logging.WARNING,
                slot=generation.identity.slot,
                release_id=generation.identity.release_id,
                revision=generation.identity.revision,
                generation=generation.identity.generation,
                leases=generation.leases,
                in_flight=generation.in_flight,
                drain_ms=round((time.monotonic() - started) * 1000, 1),
            )
            _count_stuck(generation.identity.slot)
            # No forced close: wait for the work, or for an explicit close.
            while not generation.wait_idle(1.0) and generation.close_requested is None:
                pass
        idle = generation.leases == 0 and generation.in_flight == 0
        try:
            generation.shutdown(timeout=5.0)
        finally:
            with self._route_lock:
                self._draining.discard(generation)
        emit(
            "ModuleGenerationDrained",
            level=logging.INFO if idle else logging.WARNING,
            slot=generation.identity.slot,
            release_id=generation.identity.release_id,
            revision=generation.identity.revision,
            generation=generation.identity.generation,
            forced=not idle,
            closed_by=generation.close_requested if not idle else None,
            was_stuck=generation.stuck,
            drain_ms=round((time.monotonic() - started) * 1000, 1),
        )

    def draining(self) -> list[GenerationIdentity]:
        with self._route_lock:
            return [g.identity for g in self._draining]

    def draining_state(self) -> list[dict[str, Any]]:
        """The draining generations with their stuck flag and the work they still hold."""
        with self._route_lock:
            generations = sorted(self._draining, key=lambda g: g.identity.generation)
        return [
            {
                "release_id": g.identity.release_id,
                "revision": g.identity.revision,
                "generation": g.identity.generation,
                "stuck": g.stuck,
                "leases": g.leases,
                "in_flight": g.in_flight,
            }
            for g in generations
        ]

    def close_stuck(self, slot: str, *, through_revision: int, by: str) -> list[int]:
        """An admin's explicit close: the stuck draining generations of ``slot`` with a
        revision up to ``through_revision`` stop waiting and shut down (their work ends
        with the worker). Returns the generations closed."""
        with self._route_lock:
            chosen = [
                g
                for g in self._draining
                if g.identity.slot == slot
                and g.stuck
                and g.identity.revision <= through_revision
                and g.close_requested is None
            ]
        for generation in chosen:
            generation.force_close(by)
        return sorted(g.identity.generation for g in chosen)

    def close(self, timeout: float | None = None) -> None:
        """Stop routing, drain every generation and wait for the drains (shutdown path)."""
        with self._route_lock:
            if self._closed:
                generations: list[Generation] = []
            else:
                self._closed = True
                generations = [g for g in self._current.values() if g is not None]
            for name in self._current:
                self._current[name] = None
        for generation in generations:
            self._retire(generation)
        deadline = time.monotonic() + (self.drain_timeout + 10 if timeout is None else timeout)
        with self._route_lock:
            drainers = list(self._drainers)
        for thread in drainers:
            thread.join(max(0.0, deadline - time.monotonic()))
        # Process shutdown (RUN-2): what is still draining now ends with the process.
        with self._route_lock:
            left = list(self._draining)
        for generation in left:
            generation.force_close("shutdown")
        for thread in drainers:
            thread.join(max(0.0, min(10.0, deadline + 10 - time.monotonic())))


def _accepts(current: Generation | None, revision: int) -> bool:
    """A higher revision, or the applied one again when its generation is unhealthy
    (crash recovery); anything when nothing is installed."""
    if current is None:
        return True
    applied = current.identity.revision
    return revision > applied or (revision == applied and not current.available())


def _count_stuck(slot: str) -> None:
    try:
        from app import observability

        observability.MODULE_GENERATIONS_STUCK.labels(slot).inc()
    except Exception:  # a metric must never break a drain
        logging.getLogger(__name__).debug("stuck-generation metric not recorded", exc_info=True)
