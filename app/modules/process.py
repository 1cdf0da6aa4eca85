"""The host side of a module worker process: spawn, handshake, one call at a time, recycle.

The worker runs the release's artifact with the host's Python in isolated
mode (``-I``: no PYTHON* variables, no user site, no current directory on the
path) and a cleaned environment, so no credential of the host reaches it. Its
stdin and stdout are private pipes carrying frames (``wire``); its stderr is
the host's, so its log lines land with ours.

Faults (MOD-6): a business error comes back as an ``Execution`` error and the
process stays; a request frame over the limit is refused before a byte is
written and the process stays; a corrupt frame, a response for another
request or release, a closed pipe or the IPC timeout kill and reap the
process at once and mark it broken, so the refresh loop replaces it with a
fresh process for the same selection.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import subprocess
import sys
import time
import uuid
from typing import Any

from app.modules import wire
from app.modules.errors import ErrorKind, ModuleError
from app.modules.releases import Release
from app.observability import emit

# The only variables a worker gets: enough for the interpreter and UTF-8 I/O.
_CLEAN_ENVIRONMENT = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"}


class IpcFault(ModuleError):
    def __init__(self, code: str, message: str):
        super().__init__(ErrorKind.UNAVAILABLE, code, message)


class WorkerProcess:
    """One worker process and its two pipes; ``call`` is serialised by the caller."""

    def __init__(self, release: Release, *, max_frame_bytes: int, ipc_timeout: float):
        self.release = release
        self.max_frame_bytes = max_frame_bytes
        self.ipc_timeout = ipc_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.broken: str | None = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                sys.executable,
                # -S: a self-contained release (MOD-9) never sees the server's site-packages.
                # -B: nothing is ever written into a release (its lib/ digest must hold).
                *(["-I", "-S", "-B"] if self.release.self_contained else ["-I"]),
                str(self.release.artifact),
                "--release-id",
                self.release.release_id,
                "--max-frame-bytes",
                str(self.max_frame_bytes),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=None,
            env=dict(_CLEAN_ENVIRONMENT),
            cwd="/",
            close_fds=True,
            bufsize=0,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in_fd = self.process.stdin.fileno()
        self._out_fd = self.process.stdout.fileno()
        os.set_blocking(self._in_fd, False)
        self._poll_out = select.poll()
        self._poll_out.register(self._out_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        self._poll_in = select.poll()
        self._poll_in.register(self._in_fd, select.POLLOUT | select.POLLERR)
        emit(
            "ModuleWorkerStarted",
            release_id=self.release.release_id,
            worker_pid=self.process.pid,
        )

    def alive(self) -> bool:
        return self.broken is None and self.process is not None and self.process.poll() is None

    # -- one request/response ------------------------------------------------------------
    def call(self, method: str, payload: Any, timeout: float | None = None) -> dict[str, Any]:
        """Send one request and wait for its response; raises ``IpcFault`` after recycling."""
        if not self.alive():
            raise IpcFault("worker_unavailable", self.broken or "worker process is not running")
        request_id = uuid.uuid4().hex
        message = {
            "requestId": request_id,
            "rpcVersion": wire.RPC_VERSION,
            "releaseId": self.release.release_id,
            "method": method,
            "payload": payload,
        }
        try:
            frame = wire.encode_frame(message, self.max_frame_bytes)
        except wire.FrameTooLarge as exc:
            # Refused before writing: the pipe is untouched and the process stays healthy.
            raise ModuleError(ErrorKind.EXECUTION, "request_frame_too_large", str(exc)) from None
        deadline = time.monotonic() + (timeout if timeout is not None else self.ipc_timeout)
        try:
            self._write_all(frame, deadline)
            header = self._read_exactly(wire.HEADER.size, deadline)
            (length,) = wire.HEADER.unpack(header)
            wire.check_length(length, self.max_frame_bytes)
            reply = wire.decode_body(self._read_exactly(length, deadline))
        except TimeoutError:
            self._recycle("ipc_timeout")
            raise IpcFault("ipc_timeout", "worker did not answer within the IPC timeout") from None
        except wire.PipeClosed as exc:
            self._recycle(self.broken or "pipe_closed")
            raise IpcFault("pipe_closed", str(exc)) from None
        except wire.FrameError as exc:
            self._recycle("corrupt_frame")
            raise IpcFault("corrupt_frame", str(exc)) from None
        if (
            reply.get("requestId") != request_id
            or reply.get("releaseId") != self.release.release_id
            or reply.get("rpcVersion") != wire.RPC_VERSION
        ):
            self._recycle("identity_mismatch")
            raise IpcFault(
                "identity_mismatch", "response does not match the request, release or rpc version"
            )
        return reply

    def _write_all(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if not self._poll_in.poll(remaining * 1000):
                continue
            try:
                written = os.write(self._in_fd, view)
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError) as exc:
                if isinstance(exc, BrokenPipeError) or exc.errno in (errno.EPIPE, errno.EBADF):
                    raise wire.PipeClosed("worker closed its stdin") from None
                raise
            view = view[written:]

    def _read_exactly(self, size: int, deadline: float) -> bytes:
        buffer = bytearray()
        while len(buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            if not self._poll_out.poll(remaining * 1000):
                continue
            chunk = os.read(self._out_fd, size - len(buffer))
            if not chunk:
                raise wire.PipeClosed("worker closed its stdout")
            buffer += chunk
        return bytes(buffer)

    # -- ending ----------------------------------------------------------------------------
    # ``kill`` may be called from any thread (a forced drain): it only signals and reaps, so
    # a call in progress sees EOF and fails. Pipes are closed only by the thread that owns
    # the calls (``_recycle``, ``close``), so no descriptor is closed under a reader's feet.
    def kill(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason
        process = self.process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            emit(
                "ModuleWorkerKilled",
                level=logging.WARNING,
                release_id=self.release.release_id,
                worker_pid=process.pid,
                reason=reason,
            )
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)

    def _recycle(self, reason: str) -> None:
        self.kill(reason)
        self._close_pipes()

    def close(self, timeout: float = 5.0) -> None:
        """Graceful end (caller owns the calls): closing stdin tells the worker to exit."""
        process = self.process
        if process is None:
            return
        if self.broken is None:
            self.broken = "closed"
        with contextlib.suppress(OSError):
            assert process.stdin is not None
            process.stdin.close()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill("close_timeout")
        self._close_pipes()
        emit(
            "ModuleWorkerStopped",
            release_id=self.release.release_id,
            worker_pid=process.pid,
            exitcode=process.returncode,
        )

    def _close_pipes(self) -> None:
        process = self.process
        if process is None:
            return
        for stream in (process.stdin, process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
