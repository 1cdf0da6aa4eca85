"""A real gunicorn serving the app, as production runs it (``python:app.gunicorn_conf``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import requests

from tests.support.processes import PROJECT_ROOT, base_env, free_port
from tests.support.settings import TEST_SECRET_KEY
from tests.support.waiting import wait_until


class GunicornServer:
    """gunicorn on 127.0.0.1 and a free port, against ``database_url``; logs to a file."""

    def __init__(self, database_url: str, data_dir: Path, log: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        environment = base_env(
            NETMAP_DATABASE_URL=database_url,
            NETMAP_SECRET_KEY=TEST_SECRET_KEY,
            NETMAP_BIND=f"127.0.0.1:{self.port}",
            NETMAP_DATA_DIR=str(data_dir),
            NETMAP_LOG_LEVEL="WARNING",
            **env,
        )
        environment.pop("XDG_RUNTIME_DIR", None)
        environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
        self.log_path = log
        self._log = open(log, "wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:app.gunicorn_conf", "wsgi:app"],
            cwd=PROJECT_ROOT,
            env=environment,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        wait_until(self._ready, timeout=60, interval=0.1)

    def _ready(self) -> bool:
        if self.process.poll() is not None:
            raise AssertionError(
                f"gunicorn exited with {self.process.returncode}: "
                + self.log_path.read_text(errors="replace")[-3000:]
            )
        try:
            return requests.get(self.url + "/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def short_directory(prefix: str) -> Path:
    """A directory with a short path: a Unix socket path must stay under ~100 bytes."""
    import tempfile

    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


__all__ = ["GunicornServer", "short_directory"]
