"""Misbehaving runner workers under the real supervisor (supervision tests).

``python -m tests.support.runner_faults MODE PROCESSES`` runs ``jobs.runner.Supervisor``
with a worker that either hangs once after booting (``hang``) or cannot import
its code (``import-error``). Settings are small so the tests finish quickly;
the supervisor needs no database, and these workers never connect to one.
``RUNNER_FAULT_DIR`` is where the hanging worker remembers that it already hung.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from app.config import load_settings
from app.observability import configure_logging, emit


def _settings():
    settings, _check = load_settings(
        env={},
        overrides={
            "runner": {
                "worker_timeout": 2.0,
                "heartbeat_seconds": 0.1,
                "worker_restart_backoff_seconds": 0.1,
                "boot_failure_limit": 3,
                "shutdown_timeout_seconds": 5.0,
            }
        },
    )
    return settings


def hangs_once(worker_id: int, settings, database_url: str, heartbeat_path: str) -> None:
    """Boots, then (first incarnation only) stops beating as a job stuck forever would."""
    from jobs.runner import Heartbeat

    configure_logging()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    heartbeat = Heartbeat(heartbeat_path, settings.runner.heartbeat_seconds)
    heartbeat.ready()
    marker = Path(os.environ["RUNNER_FAULT_DIR"]) / "hung-once"
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        emit("FakeWorkerHanging", worker_id=worker_id, pid=os.getpid())
        while True:
            time.sleep(3600)
    emit("FakeWorkerHealthy", worker_id=worker_id, pid=os.getpid())
    while not stop:
        heartbeat.beat()
        time.sleep(0.02)


def imports_broken_code(worker_id: int, settings, database_url: str, heartbeat_path: str) -> None:
    """Dies while booting, as a worker whose job code has an import error does."""
    import tests.support.runner_broken_module  # noqa: F401 - raises ImportError


def main() -> int:
    from jobs.runner import Supervisor

    configure_logging()
    mode, processes = sys.argv[1], int(sys.argv[2])
    target = {"hang": hangs_once, "import-error": imports_broken_code}[mode]
    return Supervisor(_settings(), "postgresql://unused", processes, worker_target=target).run()


if __name__ == "__main__":
    sys.exit(main())
