"""Starting and watching real processes in tests (netmap up, the runner, gunicorn)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.database import scratch_parent

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def netmap_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "app", *args]


def run_bench(name: str, *args: str, check: bool = True, scratch_on_disk: bool = False) -> Any:
    """``netmap bench NAME ARGS`` as operators run it: its JSON report, or (``check=False``)
    the finished process. ``scratch_on_disk``: the bench's scratch server in the system's
    temporary directory, as operators run it, not in the suite's (see below)."""
    # A bench starts its own scratch server in a temporary directory: in the tests that is
    # where the suite's own server lives (in memory when there is room), since the bench's
    # figures are not asserted and its database is small.
    parent = None if scratch_on_disk else scratch_parent()
    process = subprocess.run(
        netmap_command("bench", name, *args),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "TMPDIR": parent} if parent else None,
    )
    if not check:
        return process
    assert process.returncode == 0, process.stderr[-2000:]
    return json.loads(process.stdout)


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    # The suite's servers and agents scan 127.0.0.0/8: the test configuration allows
    # loopback targets (the default refuses them, SCN-7).
    env["NETMAP_SCAN_SPECIAL_USE_TARGETS"] = "loopback,private"
    # Tests run a report definition several times in a row (the cooldown has its own tests).
    env["NETMAP_REPORTS_RUN_NOW_COOLDOWN_SECONDS"] = "0"
    env.update(extra)
    return env


def run_python(script: str, env: dict[str, str], timeout: float = 60) -> str:
    """Run ``script`` in a fresh interpreter at the project root with exactly ``env``
    (process-wide settings such as gc or a config module's import-time state start
    clean); its stdout, once it exited 0."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


class LoggedProcess:
    """A child process whose stdout/stderr go to files we can read while it runs."""

    def __init__(self, args: list[str], env: dict[str, str], log_dir: Path, name: str):
        self.stdout_path = log_dir / f"{name}.out"
        self.stderr_path = log_dir / f"{name}.err"
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        self.process = subprocess.Popen(
            args, env=env, cwd=PROJECT_ROOT, stdout=self._out, stderr=self._err
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        found = []
        for line in self.stderr().splitlines():
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if name is None or event.get("event") == name:
                found.append(event)
        return found

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def stop(self, timeout: float = 30) -> int | None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._out.close()
        self._err.close()
        return self.process.returncode


def worker_pids(runner: LoggedProcess) -> set[int]:
    """The runner's worker processes (multiprocessing spawn children)."""
    import psutil

    return {
        child.pid
        for child in psutil.Process(runner.pid).children()
        if "spawn" in " ".join(child.cmdline())
    }


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    message: str = "condition",
    *,
    interval: float = 0.1,
) -> Any:
    """``predicate``'s first true value, asked every ``interval`` seconds (a shorter one
    catches states that last milliseconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")
