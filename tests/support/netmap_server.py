"""A real netmap server for agent tests: `netmap up` (gunicorn + runner) on a test database.

The server runs on 127.0.0.1 and a free port against the per-test database;
``NetmapServer`` logs in as the admin (browser session with CSRF) and creates
scanner tokens through the admin API, so tests drive it exactly as operators do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.support.processes import LoggedProcess, base_env, free_port, netmap_command, wait_for

ADMIN_PASSWORD = "agent-tests-Qx7-long-passphrase"


@dataclass
class NetmapServer:
    url: str
    process: LoggedProcess
    session: requests.Session
    csrf: str

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        headers = {"X-CSRF-Token": self.csrf, **kwargs.pop("headers", {})}
        return self.session.post(self.url + path, headers=headers, timeout=120, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.session.get(self.url + path, timeout=30, **kwargs)

    def scanner_token(self, name: str = "agent") -> str:
        response = self.post("/api/scanners", json={"name": name})
        assert response.status_code == 201, response.text
        return response.json()["token"]

    def create_task(
        self, targets: list[str], ports: str, transports=("tcp",), profile: str | None = None
    ) -> dict[str, Any]:
        body = {"name": "agent", "targets": targets, "ports": ports, "transports": list(transports)}
        if profile is not None:
            body["profile"] = profile
        response = self.post("/api/tasks", json=body)
        assert response.status_code == 201, response.text
        return response.json()["task"]

    def executions(self, task_id: int) -> list[dict[str, Any]]:
        response = self.get(f"/api/tasks/{task_id}/executions")
        assert response.status_code == 200, response.text
        return response.json()["items"]

    def assets(self, **params: Any) -> list[dict[str, Any]]:
        response = self.get("/api/assets", params={"limit": 500, **params})
        assert response.status_code == 200, response.text
        return response.json()["items"]


@contextmanager
def netmap_server(
    database_url: str, tmp_path: Path, *, runner: bool = True, port: int | None = None, **env: str
) -> Iterator[NetmapServer]:
    """``port``: given to restart a server where its clients expect it."""
    port = port or free_port()
    environment = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_SECRET_KEY="agent-tests-secret-key-0123456789abcdef",
        NETMAP_ADMIN_PASSWORD=ADMIN_PASSWORD,
        NETMAP_RUNNER_PROCESSES="1",
        NETMAP_RUNNER_IDLE_BACKOFF_MAX_SECONDS="0.2",
        **env,
    )
    args = ["--data-dir", str(tmp_path / "var"), "up", "--port", str(port)]
    if not runner:
        args.append("--no-runner")
    tmp_path.mkdir(parents=True, exist_ok=True)
    process = LoggedProcess(netmap_command(*args), environment, tmp_path, "netmap-up")
    try:
        found = wait_for(
            lambda: (
                re.search(r"netmap is up: (\S+)", process.stdout())
                or process.process.poll() is not None
            ),
            120,
            "netmap up",
        )
        assert process.process.poll() is None, process.stderr()[-3000:]
        url = found.group(1)
        session = requests.Session()
        login = session.post(
            url + "/api/auth/login",
            json={"username": "admin", "password": ADMIN_PASSWORD},
            timeout=30,
        )
        assert login.status_code == 200, login.text
        yield NetmapServer(url, process, session, login.json()["csrf_token"])
    finally:
        process.stop(timeout=40)
