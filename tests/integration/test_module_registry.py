"""Generations and leases over real worker processes: switch, old leases, drain, capacity."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.config import load_settings
from app.modules.errors import ErrorKind, ModuleError, StaleRevision
from app.modules.registry import ModuleRegistry
from app.modules.report_render import SLOT_NAME, open_candidate, report_render_slot
from app.renderer.contract import self_test_input
from tests.support.settings import FAULTY_RELEASE, RENDERER_RELEASES
from tests.support.waiting import process_gone, wait_until


def make_registry(directory: Path, **renderer):
    settings, _ = load_settings(
        env={}, overrides={"report_renderer": {"releases_directory": str(directory), **renderer}}
    )
    registry = ModuleRegistry(
        [report_render_slot(settings)],
        drain_timeout=settings.report_renderer.drain_timeout_seconds,
    )
    return settings, registry


@pytest.fixture
def registry_for(renderer_releases):
    registries: list[ModuleRegistry] = []

    def factory(**renderer):
        settings, registry = make_registry(renderer_releases, **renderer)
        registries.append(registry)
        return settings, registry

    yield factory
    for registry in registries:
        registry.close(timeout=20)


def install(settings, registry, release_id: str, revision: int):
    module = open_candidate(settings, release_id)
    return registry.install(SLOT_NAME, module, release_id=release_id, revision=revision), module


def slow(seconds: float) -> dict:
    payload = self_test_input()
    payload["template"]["version"] = f"fault:sleep:{seconds}"
    return payload


def _events(caplog, name: str) -> list[dict]:
    return [r.netmap_fields for r in caplog.records if getattr(r, "netmap_event", "") == name]


def test_nothing_applied_is_not_ready():
    settings, _ = load_settings(env={})
    registry = ModuleRegistry([report_render_slot(settings)], drain_timeout=1)
    with pytest.raises(ModuleError) as caught:
        registry.acquire(SLOT_NAME)
    assert caught.value.kind is ErrorKind.NOT_READY and caught.value.retryable


def test_version_switch_old_lease_keeps_old_generation_and_drains_after(registry_for):
    settings, registry = registry_for()
    first, first_module = install(settings, registry, RENDERER_RELEASES[0], 1)
    old_lease = registry.acquire(SLOT_NAME)
    assert old_lease.identity.release_id == RENDERER_RELEASES[0]

    _second, second_module = install(settings, registry, RENDERER_RELEASES[1], 2)
    new_lease = registry.acquire(SLOT_NAME)
    assert new_lease.identity.release_id == RENDERER_RELEASES[1]
    assert new_lease.identity.generation == first.identity.generation + 1
    assert first_module.pid != second_module.pid

    # The old handle still works, on the old process, which stays up while it is held.
    assert old_lease.invoke("render", self_test_input())["template_version"] == "self-test-1"
    assert first_module.available() and first.identity in registry.draining()
    assert new_lease.invoke("render", self_test_input())["subject"].startswith("[netmap]")

    old_pid = first_module.pid
    old_lease.release()
    wait_until(lambda: not registry.draining())
    assert first.closed and first_module.worker.process.returncode is not None
    assert process_gone(old_pid)
    with pytest.raises(RuntimeError, match="released"):
        old_lease.invoke("render", self_test_input())
    new_lease.release()


def test_drain_waits_for_in_flight_work_then_reaps(registry_for):
    settings, registry = registry_for()
    first, first_module = install(settings, registry, FAULTY_RELEASE, 1)
    started = threading.Event()
    results: list[object] = []

    def call() -> None:
        with registry.acquire(SLOT_NAME) as lease:
            started.set()
            try:
                results.append(lease.invoke("render", slow(1.0)))
            except ModuleError as exc:
                results.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    started.wait(5)
    wait_until(lambda: first.in_flight == 1)
    install(settings, registry, RENDERER_RELEASES[0], 2)
    # Swapped, but the old generation keeps its process while the call runs.
    assert first_module.available()
    assert first.identity in registry.draining()
    thread.join(20)
    assert isinstance(results[0], dict), results
    assert results[0]["template_version"] == "fault:sleep:1.0"
    wait_until(lambda: not registry.draining())
    assert process_gone(first_module.pid)


def test_deadline_exceeded_keeps_capacity_until_the_work_really_ends(registry_for):
    settings, registry = registry_for(wait_timeout_seconds=0.2)
    generation, module = install(settings, registry, FAULTY_RELEASE, 1)
    with registry.acquire(SLOT_NAME) as lease:
        with pytest.raises(ModuleError) as caught:
            lease.invoke("render", slow(1.5))
    assert caught.value.kind is ErrorKind.DEADLINE_EXCEEDED and caught.value.retryable
    assert "still running" in caught.value.message
    # The caller gave up, the work did not: it still counts.
    assert registry.capacity_used(SLOT_NAME) == 1 and generation.in_flight == 1
    assert module.available()
    wait_until(lambda: registry.capacity_used(SLOT_NAME) == 0, timeout=20)
    assert generation.in_flight == 0 and module.available()


def test_busy_beyond_host_capacity_and_drain_counts_abandoned_work(registry_for):
    settings, registry = registry_for(max_in_flight=2, wait_timeout_seconds=0.2)
    old, old_module = install(settings, registry, FAULTY_RELEASE, 1)
    errors: list[ModuleError] = []
    for _ in range(2):
        with registry.acquire(SLOT_NAME) as lease:
            try:
                lease.invoke("render", slow(1.0))
            except ModuleError as exc:
                errors.append(exc)
    assert [e.kind for e in errors] == [ErrorKind.DEADLINE_EXCEEDED] * 2
    assert registry.capacity_used(SLOT_NAME) == 2
    with registry.acquire(SLOT_NAME) as lease, pytest.raises(ModuleError) as caught:
        lease.invoke("render", self_test_input())
    assert caught.value.kind is ErrorKind.BUSY

    # Swap while that abandoned work runs: the old generation drains only once it ended,
    # and the new generation shares the host capacity meanwhile.
    install(settings, registry, RENDERER_RELEASES[0], 2)
    assert old.identity in registry.draining() and old_module.available()
    wait_until(lambda: not registry.draining(), timeout=20)
    assert registry.capacity_used(SLOT_NAME) == 0
    assert process_gone(old_module.pid)
    with registry.acquire(SLOT_NAME) as lease:
        assert lease.invoke("render", self_test_input())["subject"]


def test_install_refuses_older_or_equal_healthy_revisions(registry_for):
    settings, registry = registry_for()
    install(settings, registry, "builtin", 3)
    module = open_candidate(settings, RENDERER_RELEASES[0])
    try:
        for revision in (2, 3):
            with pytest.raises(StaleRevision):
                registry.install(
                    SLOT_NAME, module, release_id=RENDERER_RELEASES[0], revision=revision
                )
    finally:
        module.shutdown(timeout=2)
    assert registry.current(SLOT_NAME).identity.revision == 3


def test_crashed_generation_may_be_replaced_at_the_same_revision(registry_for):
    settings, registry = registry_for()
    crashed, _module = install(settings, registry, FAULTY_RELEASE, 4)
    payload = self_test_input()
    payload["template"]["version"] = "fault:exit"
    with registry.acquire(SLOT_NAME) as lease, pytest.raises(ModuleError) as caught:
        lease.invoke("render", payload)
    assert caught.value.kind is ErrorKind.UNAVAILABLE
    assert not crashed.available()
    replacement, _ = install(settings, registry, FAULTY_RELEASE, 4)
    assert replacement.identity.revision == 4
    assert replacement.identity.generation == crashed.identity.generation + 1
    with registry.acquire(SLOT_NAME) as lease:
        assert lease.invoke("render", self_test_input())["subject"]


def test_slot_rejects_methods_schemas_and_sizes_before_any_work(registry_for):
    settings, registry = registry_for()
    install(settings, registry, "builtin", 1)
    with registry.acquire(SLOT_NAME) as lease:
        for method, payload, code in (
            ("shutdown", self_test_input(), "method_not_allowed"),
            ("render", {"template": {}}, "invalid_input"),
            ("render", {**self_test_input(), "extra": 1}, "invalid_input"),
            (
                "render",
                {**self_test_input(), "context": {"pad": "x" * (800 * 1024)}},
                "payload_too_large",
            ),
        ):
            with pytest.raises(ModuleError) as caught:
                lease.invoke(method, payload)
            assert caught.value.code == code and caught.value.kind is ErrorKind.EXECUTION
    assert registry.capacity_used(SLOT_NAME) == 0


def test_a_generation_with_a_lease_never_released_is_reported_stuck_not_closed(
    registry_for, caplog
):
    """MOD-2: no forced close while a handle is out; an admin closes it explicitly."""
    settings, registry = registry_for(drain_timeout_seconds=0.3)
    old, old_module = install(settings, registry, RENDERER_RELEASES[0], 1)
    forgotten = registry.acquire(SLOT_NAME)
    with caplog.at_level("INFO", logger="netmap.events"):
        install(settings, registry, RENDERER_RELEASES[1], 2)
        wait_until(lambda: any(d["stuck"] for d in registry.draining_state()))
        (state,) = registry.draining_state()
        assert (state["generation"], state["revision"], state["leases"]) == (1, 1, 1)
        assert not old.closed and not process_gone(old_module.pid)
        assert forgotten.invoke("render", self_test_input())["subject"]  # still serves it
        # Only stuck generations up to the revision named are closed.
        assert registry.close_stuck(SLOT_NAME, through_revision=0, by="admin") == []
        assert registry.close_stuck(SLOT_NAME, through_revision=1, by="admin:7") == [1]
        wait_until(lambda: _events(caplog, "ModuleGenerationDrained"))
    assert old.closed and process_gone(old_module.pid)
    assert _events(caplog, "ModuleGenerationStuck")[0]["generation"] == 1
    (drained,) = _events(caplog, "ModuleGenerationDrained")
    assert drained["forced"] and drained["closed_by"] == "admin:7" and drained["was_stuck"]
    with pytest.raises(ModuleError) as caught:
        forgotten.invoke("render", self_test_input())
    assert caught.value.kind is ErrorKind.UNAVAILABLE and caught.value.retryable
    forgotten.release()


def test_work_in_flight_past_the_drain_timeout_finishes_before_the_close(registry_for, caplog):
    settings, registry = registry_for(drain_timeout_seconds=0.3, wait_timeout_seconds=20)
    old, old_module = install(settings, registry, FAULTY_RELEASE, 1)
    results: list = []

    def call() -> None:
        with registry.acquire(SLOT_NAME) as lease:
            results.append(lease.invoke("render", slow(2.0)))

    worker = threading.Thread(target=call)
    with caplog.at_level("INFO", logger="netmap.events"):
        worker.start()
        wait_until(lambda: registry.capacity_used(SLOT_NAME) == 1)
        install(settings, registry, RENDERER_RELEASES[1], 2)
        wait_until(lambda: any(d["stuck"] for d in registry.draining_state()))
        assert not old.closed
        worker.join(30)
        wait_until(lambda: _events(caplog, "ModuleGenerationDrained"))
    assert results[0]["template_version"] == "fault:sleep:2.0"  # not cut off
    drained = _events(caplog, "ModuleGenerationDrained")
    assert drained[-1]["forced"] is False and drained[-1]["was_stuck"] is True
    assert process_gone(old_module.pid)
