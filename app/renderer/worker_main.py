"""Entry point of the separately built renderer worker (``nm-report-render-worker``).

The host starts the worker with private pipes: requests arrive on stdin, and
stdout carries protocol frames only (anything printed by accident goes to
stderr, where the worker's log lines go). One request is handled at a time.
Business errors (``RenderRejected``) are answered and the process carries on;
an unexpected exception ends the process, so the host sees a pipe failure and
restarts a fresh process instead of trusting a worker in an unknown state.

``_build_info.json`` is written next to this file by the builder: the release
id the artifact was built as and whether the test-only fault hooks are on.
Only a build made with ``test_faults`` (a test-only option of the builder)
ever honours a ``fault:…`` template version; release builds ignore it.
"""

from __future__ import annotations

import argparse
import json
import os
import pkgutil
import sys
import time
from typing import Any

from ..modules import wire
from .contract import METHOD_RENDER, MODULE_NAME, RenderRejected
from .render import render


def _log(event: str, **fields: Any) -> None:
    now = time.time()
    stamp = (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}+00:00"
    )
    record = {"ts": stamp, "level": "info", "pid": os.getpid(), "event": event, **fields}
    sys.stderr.write(json.dumps(record, default=str) + "\n")
    sys.stderr.flush()


def _build_info() -> dict[str, Any]:
    raw = pkgutil.get_data(__package__ or "", "_build_info.json")
    if raw is None:
        raise SystemExit("worker build info missing")
    return json.loads(raw)


def _versions() -> dict[str, str]:
    import css_inline
    import jinja2
    import markupsafe
    import nh3

    return {
        "python": ".".join(map(str, sys.version_info[:3])),
        "jinja2": jinja2.__version__,
        "markupsafe": markupsafe.__version__,
        "nh3": getattr(nh3, "__version__", "unknown"),
        "css_inline": getattr(css_inline, "__version__", "unknown"),
    }


class Worker:
    def __init__(
        self, release_id: str, max_frame_bytes: int, test_faults: dict[str, Any] | None, out: Any
    ):
        self.release_id = release_id
        self.max_frame_bytes = max_frame_bytes
        self.test_faults = test_faults
        self.out = out

    def send(self, message: dict[str, Any]) -> None:
        try:
            frame = wire.encode_frame(message, self.max_frame_bytes)
        except wire.FrameTooLarge:
            error = {
                "kind": "Execution",
                "code": "output_too_large",
                "message": "response too large",
            }
            frame = wire.encode_frame(
                {k: message[k] for k in ("requestId", "rpcVersion", "releaseId")}
                | {"ok": False, "error": error},
                self.max_frame_bytes,
            )
        self.out.write(frame)
        self.out.flush()

    def handle(self, request: dict[str, Any]) -> None:
        if request.get("rpcVersion") != wire.RPC_VERSION:
            error = {
                "kind": "Unavailable",
                "code": "unsupported_rpc_version",
                "message": f"worker speaks rpcVersion {wire.RPC_VERSION}",
            }
            self.send(wire.response(request, self.release_id, error=error))
            return
        method = request.get("method")
        payload = request.get("payload")
        if method == "handshake":
            result: dict[str, Any] = {
                "module": MODULE_NAME,
                "methods": [METHOD_RENDER],
                "rpcVersion": wire.RPC_VERSION,
                "pid": os.getpid(),
                "versions": _versions(),
            }
            if isinstance(payload, dict) and payload.get("introspect"):
                # Lets the host's tests prove what the worker loaded and inherited.
                result["loaded_modules"] = sorted(sys.modules)
                result["environment_keys"] = sorted(os.environ)
                result["sys_path"] = list(sys.path)
                result["native_files"] = {
                    name: getattr(sys.modules.get(name), "__file__", None)
                    for name in ("nh3", "css_inline", "markupsafe")
                }
            self.send(wire.response(request, self.release_id, result=result))
        elif method == "ping":
            self.send(wire.response(request, self.release_id, result={"pid": os.getpid()}))
        elif method == METHOD_RENDER:
            if self.test_faults is not None and self._fault(request):
                return
            try:
                output = render(payload)
            except RenderRejected as exc:
                error = {"kind": "Execution", "code": exc.code, "message": exc.message}
                self.send(wire.response(request, self.release_id, error=error))
                return
            self.send(wire.response(request, self.release_id, result=output))
            if (
                self.test_faults
                and self.test_faults.get("exit_after_self_test")
                and output.get("template_version") == "self-test-1"
            ):
                os._exit(0)
        else:
            error = {"kind": "Execution", "code": "unknown_method", "message": str(method)[:64]}
            self.send(wire.response(request, self.release_id, error=error))

    def _fault(self, request: dict[str, Any]) -> bool:
        """Test builds only: misbehave on purpose when the template version asks for it."""
        try:
            version = request["payload"]["template"]["version"]
        except (KeyError, TypeError):
            return False
        if not isinstance(version, str) or not version.startswith("fault:"):
            return False
        _, name, *args = version.split(":")
        if name == "sleep":
            time.sleep(float(args[0]))
            return False  # then render normally
        if name == "corrupt":
            body = b"{not json"
            self.out.write(wire.HEADER.pack(len(body)) + body)
            self.out.flush()
            return True
        if name == "oversized-length":
            self.out.write(wire.HEADER.pack(0xFFFFFFF0))
            self.out.flush()
            return True
        if name == "wrong-request-id":
            self.send(wire.response({"requestId": "not-yours"}, self.release_id, result={}))
            return True
        if name == "wrong-release":
            self.send(wire.response(request, self.release_id + "-other", result={}))
            return True
        if name == "exit":
            os._exit(7)
        if name == "raise":
            raise RuntimeError("fault injected: unexpected exception inside the worker")
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nm-report-render-worker")
    parser.add_argument("--release-id", required=True)
    parser.add_argument("--max-frame-bytes", type=int, default=wire.DEFAULT_MAX_FRAME_BYTES)
    args = parser.parse_args(argv)
    info = _build_info()
    if args.release_id != info["release_id"]:
        _log("RendererWorkerIdentityMismatch", expected=args.release_id, built=info["release_id"])
        return 2
    # stdout belongs to the protocol: keep a private handle on it and point fd 1 at stderr,
    # so a stray print (ours or a library's) can never corrupt a frame.
    protocol_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    stdin = sys.stdin.buffer
    worker = Worker(info["release_id"], args.max_frame_bytes, info.get("test_faults"), protocol_out)
    _log("RendererWorkerStarted", release_id=info["release_id"])
    while True:
        try:
            request = wire.read_frame(stdin, args.max_frame_bytes)
        except wire.FrameError as exc:
            _log("RendererWorkerFrameError", error=str(exc))
            return 3
        if request is None:
            _log("RendererWorkerStdinClosed")
            return 0
        try:
            worker.handle(request)
        except (BrokenPipeError, wire.FrameError):
            return 0
        except Exception as exc:  # noqa: BLE001 - exit so the host recycles us
            _log("RendererWorkerCrashed", error=f"{type(exc).__name__}: {exc}")
            return 4
