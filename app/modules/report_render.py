"""The ``report-render`` slot and its two kinds of implementation.

``builtin`` runs ``app.renderer`` in this process. An installed release runs
the same renderer in its own worker process (``ProcessModule``). Either way a
candidate becomes a generation only after ``open_candidate`` has prepared it
(release checks, process start, protocol handshake) and self-tested it on a
fixed sample: a candidate that fails any step is shut down and rejected, and
nothing else changes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from app.config import Settings
from app.modules.contract import MethodSpec, ModuleContract, ModuleSlot
from app.modules.errors import CandidateRejected, ErrorKind, ModuleError
from app.modules.process import WorkerProcess
from app.modules.releases import BUILTIN_RELEASE, Release, locate_release
from app.renderer import contract as render_contract
from app.renderer.render import render

SLOT_NAME = render_contract.MODULE_NAME


def _check_render_output(payload: dict[str, Any], result: dict[str, Any]) -> None:
    try:
        render_contract.validate_output(payload, result)
    except render_contract.RenderRejected as exc:
        raise ModuleError(ErrorKind.EXECUTION, exc.code, exc.message) from None


def report_render_slot(settings: Settings) -> ModuleSlot:
    rr = settings.report_renderer
    return ModuleSlot(
        name=SLOT_NAME,
        methods={
            render_contract.METHOD_RENDER: MethodSpec(
                input_schema=render_contract.RENDER_INPUT_SCHEMA,
                output_schema=render_contract.RENDER_OUTPUT_SCHEMA,
                check_output=_check_render_output,
            )
        },
        max_in_flight=rr.max_in_flight,
        max_payload_bytes=render_contract.MAX_PAYLOAD_BYTES,
        wait_timeout_seconds=rr.wait_timeout_seconds,
    )


class BuiltinRenderModule:
    """The renderer in this process: always available, nothing to shut down."""

    def contract(self) -> ModuleContract:
        return ModuleContract(
            name=SLOT_NAME,
            release_id=BUILTIN_RELEASE,
            rpc_version=render_contract.RPC_VERSION,
            methods=(render_contract.METHOD_RENDER,),
        )

    def self_test(self) -> None:
        _self_test(self, BUILTIN_RELEASE)

    def invoke(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        if method != render_contract.METHOD_RENDER:
            raise ModuleError(ErrorKind.EXECUTION, "unknown_method", method)
        try:
            return render(payload)
        except render_contract.RenderRejected as exc:
            raise ModuleError(ErrorKind.EXECUTION, exc.code, exc.message) from None

    def shutdown(self, timeout: float) -> None:
        return None

    def available(self) -> bool:
        return True


HANDSHAKE_TIMEOUT_SECONDS = 30.0


class ProcessModule:
    """A release's worker process behind the module contract; one call on the pipe at a time."""

    def __init__(self, release: Release, *, max_frame_bytes: int, ipc_timeout: float):
        self.release = release
        self.worker = WorkerProcess(
            release, max_frame_bytes=max_frame_bytes, ipc_timeout=ipc_timeout
        )
        self._calls = threading.Lock()
        self._contract: ModuleContract | None = None

    def start(self, *, introspect: bool = False) -> dict[str, Any]:
        """Spawn the worker and check the protocol handshake; returns the handshake result."""
        self.worker.start()
        with self._calls:
            # The first answer comes only after a fresh interpreter has started and
            # imported the renderer, which costs far more than any render call: a
            # tight per-call ipc_timeout must not fail every start on a busy host.
            reply = self.worker.call(
                "handshake",
                {"introspect": introspect},
                timeout=max(self.worker.ipc_timeout, HANDSHAKE_TIMEOUT_SECONDS),
            )
        if not reply.get("ok"):
            raise CandidateRejected(
                self.release.release_id, f"handshake refused: {reply.get('error')}"
            )
        result = reply.get("result") or {}
        methods = result.get("methods")
        if not isinstance(methods, list) or result.get("rpcVersion") != render_contract.RPC_VERSION:
            raise CandidateRejected(self.release.release_id, "handshake result is malformed")
        self._contract = ModuleContract(
            name=str(result.get("module")),
            release_id=self.release.release_id,
            rpc_version=int(result["rpcVersion"]),
            methods=tuple(str(m) for m in methods),
            details={"versions": result.get("versions", {}), "pid": result.get("pid")},
        )
        return result

    def contract(self) -> ModuleContract:
        if self._contract is None:
            raise RuntimeError("worker not started")
        return self._contract

    def self_test(self) -> None:
        _self_test(self, self.release.release_id)

    def invoke(self, method: str, payload: dict[str, Any]) -> dict[str, Any]:
        with self._calls:
            reply = self.worker.call(method, payload)
        if reply.get("ok"):
            result = reply.get("result")
            if not isinstance(result, dict):
                raise ModuleError(ErrorKind.EXECUTION, "invalid_output", "result is not an object")
            return result
        error = reply.get("error") or {}
        kind = ErrorKind.EXECUTION
        if error.get("kind") in {k.value for k in ErrorKind}:
            kind = ErrorKind(error["kind"])
        raise ModuleError(
            kind, str(error.get("code", "worker_error")), str(error.get("message", ""))
        )

    def ping(self) -> bool:
        try:
            with self._calls:
                return bool(self.worker.call("ping", {}).get("ok"))
        except ModuleError:
            return False

    def available(self) -> bool:
        return self.worker.alive()

    @property
    def pid(self) -> int | None:
        return self.worker.pid

    def shutdown(self, timeout: float) -> None:
        # Forced drains arrive while a call may hold the pipe: kill first, so that call
        # fails at once and lets go of the lock, then close the pipes as the lock holder.
        if not self._calls.acquire(timeout=timeout):
            self.worker.kill("shutdown")
            self._calls.acquire()
        try:
            self.worker.close(timeout=timeout)
        finally:
            self._calls.release()


def _self_test(module: BuiltinRenderModule | ProcessModule, release_id: str) -> None:
    sample = render_contract.self_test_input()
    try:
        output = module.invoke(render_contract.METHOD_RENDER, sample)
        _check_render_output(sample, output)
    except ModuleError as exc:
        raise CandidateRejected(
            release_id, f"self-test failed: {exc.code}: {exc.message}"
        ) from None
    problem = render_contract.check_self_test_output(output)
    if problem:
        raise CandidateRejected(release_id, f"self-test failed: {problem}")


def releases_directory(settings: Settings) -> Path | None:
    configured = settings.report_renderer.releases_directory
    return settings.resolve_path(configured) if configured else None


def open_candidate(settings: Settings, release_id: str) -> BuiltinRenderModule | ProcessModule:
    """Prepare and self-test a candidate; raises ``CandidateRejected`` (and cleans up)."""
    if release_id == BUILTIN_RELEASE:
        builtin = BuiltinRenderModule()
        builtin.self_test()
        return builtin
    release = locate_release(releases_directory(settings), release_id)
    rr = settings.report_renderer
    module = ProcessModule(
        release, max_frame_bytes=rr.max_frame_bytes, ipc_timeout=rr.ipc_timeout_seconds
    )
    try:
        module.start()
        problem = report_render_slot(settings).check_contract(module.contract())
        if problem:
            raise CandidateRejected(release_id, problem)
        module.self_test()
    except ModuleError as exc:
        module.shutdown(timeout=1.0)
        raise CandidateRejected(release_id, f"worker failed: {exc.code}: {exc.message}") from None
    except CandidateRejected:
        module.shutdown(timeout=1.0)
        raise
    except OSError as exc:
        module.shutdown(timeout=1.0)
        raise CandidateRejected(release_id, f"worker could not be started: {exc}") from None
    return module


def confirm_alive(module: BuiltinRenderModule | ProcessModule) -> bool:
    """Last check before a prepared candidate is switched in (it may have died meanwhile)."""
    if isinstance(module, ProcessModule):
        return module.ping()
    return True
