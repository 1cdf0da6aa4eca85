"""Runs with the real agent and real nmap against loopback listeners (issue 33).

* two runs of one task with one listener stopped in between: run 2's change set lists
  it as gone, and comparing the runs works both ways;
* cancelling a run while nmap runs: the agent's next lease renewal answers 409
  ``execution_cancelled``, nmap's process group is stopped, the agent ends the execution
  cleanly (exit 0), the run is ``cancelled`` and nothing is marked gone.

One `netmap up` (web + runner) for the module, lease 10 s (renewals every ~3.3 s).
"""

from __future__ import annotations

import socket
import time
from contextlib import ExitStack

import psutil
import pytest
import sqlalchemy as sa

from tests.support.agent_process import start_agent
from tests.support.database import unique_name
from tests.support.netmap_server import netmap_server
from tests.support.processes import LoggedProcess, wait_for

pytestmark = pytest.mark.e2e

LEASE_SECONDS = 10
SLOW_SCAN = '[agent]\nnmap_extra_args = ["--max-rate", "20"]\nshutdown_grace_seconds = 1\n'


@pytest.fixture(scope="module")
def server(pg_server, template_db, tmp_path_factory):
    name = unique_name("netmap_runs")
    url = pg_server.create_database(name, template=template_db)
    directory = tmp_path_factory.mktemp("runs-server")
    with netmap_server(
        url, directory, NETMAP_SCAN_EXECUTION_LEASE_SECONDS=str(LEASE_SECONDS)
    ) as running:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        running.sql = engine  # type: ignore[attr-defined]
        running.token = running.scanner_token("runs")  # type: ignore[attr-defined]
        yield running
        engine.dispose()
    pg_server.drop_database(name)


def run_agent(server, tmp_path, name: str, config: str = "[agent]\n") -> LoggedProcess:
    return start_agent(server, tmp_path, name, config, "--once")


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    return sock


def runs_of(server, task_id: int) -> list[dict]:
    response = server.get(f"/api/tasks/{task_id}/runs")
    assert response.status_code == 200, response.text
    return response.json()["items"]


def analysed(server, task_id: int, run_id: int) -> dict:
    """The run's change set once the runner analysed every succeeded execution of it."""

    def done():
        page = server.get(f"/api/tasks/{task_id}/changes", params={"run": run_id}).json()
        return page if page["counts"]["analysed_executions"] >= 1 else None

    return wait_for(done, 120, f"analysis of run {run_id}")


def test_a_listener_stopped_between_two_runs_is_gone_in_run_2(server, tmp_path):
    with ExitStack() as stack:
        kept, stopped = listener(), listener()
        stack.callback(kept.close)
        stack.callback(stopped.close)
        ports = sorted([kept.getsockname()[1], stopped.getsockname()[1]])
        task = server.create_task(["127.0.0.1"], ",".join(map(str, ports)), profile="quick")
        first = run_agent(server, tmp_path, "first")
        assert first.wait(timeout=180) == 0, first.stderr()[-3000:]
        (run1,) = runs_of(server, task["id"])
        assert (run1["number"], run1["status"], run1["trigger"]) == (1, "succeeded", "manual")
        assert run1["counts"]["endpoints"] == 2
        changes1 = analysed(server, task["id"], run1["id"])
        assert sorted((c["kind"], c["port"]) for c in changes1["items"]) == [
            ("new", p) for p in ports
        ]

        stopped_port = stopped.getsockname()[1]
        stopped.close()
        started = server.post(f"/api/tasks/{task['id']}/runs")
        assert started.status_code == 201, started.text
        run2 = started.json()["run"]
        assert (run2["number"], run2["status"], run2["trigger"]) == (2, "queued", "manual")
        again = server.post(f"/api/tasks/{task['id']}/runs")
        assert again.status_code == 409 and again.json()["error"]["code"] == "run_active"
        second = run_agent(server, tmp_path, "second")
        assert second.wait(timeout=180) == 0, second.stderr()[-3000:]

    changes2 = analysed(server, task["id"], run2["id"])
    assert [(c["kind"], c["port"]) for c in changes2["items"]] == [("gone", stopped_port)]
    assert changes2["run_id"] == run2["id"]
    # Without run=: the latest finished run, run 2.
    latest = server.get(f"/api/tasks/{task['id']}/changes").json()
    assert latest["run_id"] == run2["id"] and latest["items"] == changes2["items"]
    assert [r["number"] for r in runs_of(server, task["id"])] == [2, 1]

    forward = server.get(
        f"/api/tasks/{task['id']}/changes",
        params={"from_run": run1["id"], "to_run": run2["id"]},
    ).json()
    assert [(c["kind"], c["port"]) for c in forward["items"]] == [("gone", stopped_port)]
    assert forward["items"][0]["old"]["state"] == "open" and forward["items"][0]["new"] is None
    backward = server.get(
        f"/api/tasks/{task['id']}/changes",
        params={"from_run": run2["id"], "to_run": run1["id"]},
    ).json()
    assert [(c["kind"], c["port"]) for c in backward["items"]] == [("new", stopped_port)]
    assert backward["items"][0]["new"]["state"] == "open" and backward["items"][0]["old"] is None
    only_gone = server.get(
        f"/api/tasks/{task['id']}/changes",
        params={"from_run": run2["id"], "to_run": run1["id"], "kind": "gone"},
    ).json()
    assert only_gone["items"] == []


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_cancelling_a_run_stops_nmap_and_marks_nothing_gone(server, tmp_path):
    with ExitStack() as stack:
        sock = listener()
        stack.callback(sock.close)
        port = sock.getsockname()[1]
        task = server.create_task(["127.0.0.1"], f"{port},20000-23000", profile="quick")
        # Run 1 finds the listener, so a later run that misses it could mark it gone.
        first = run_agent(server, tmp_path, "first")
        assert first.wait(timeout=600) == 0, first.stderr()[-3000:]
        (run1,) = runs_of(server, task["id"])
        assert run1["status"] == "succeeded"
        analysed(server, task["id"], run1["id"])

    # The listener is closed; run 2 is cancelled while nmap scans slowly.
    run2 = server.post(f"/api/tasks/{task['id']}/runs").json()["run"]
    agent = run_agent(server, tmp_path, "cancelled", SLOW_SCAN)
    try:
        started = wait_for(lambda: agent.events("AgentScanStarted"), 60, "nmap to start")
        nmap = started[0]["pid"]
        assert psutil.Process(nmap).name() == "nmap"
        cancelled_at = time.monotonic()
        answer = server.post(f"/api/tasks/{task['id']}/runs/{run2['id']}/cancel")
        assert answer.status_code == 200, answer.text
        assert answer.json()["run"]["status"] == "cancelled"
        # Within one renewal interval (a third of the lease) plus the agent's grace.
        wait_for(lambda: _gone(nmap), LEASE_SECONDS / 3 + 5, "nmap to stop")
        stopped_after = time.monotonic() - cancelled_at
        assert agent.wait(timeout=30) == 0, agent.stderr()[-3000:]
    finally:
        agent.stop()
    assert stopped_after <= LEASE_SECONDS / 3 + 5
    (event,) = agent.events("AgentExecutionCancelled")
    assert "execution_cancelled" in event["error"]
    # Learnt at a lease renewal: said as a cancel, not as a lost lease.
    assert agent.events("AgentCancelledAtRenewal") and not agent.events("AgentLeaseLost")
    assert not agent.events("AgentExecutionFailed")
    assert not list((tmp_path / "spool").rglob("execution-*"))

    runs = runs_of(server, task["id"])
    assert [(r["number"], r["status"]) for r in runs] == [(2, "cancelled"), (1, "succeeded")]
    assert runs[0]["finished_at"] is not None
    (execution,) = [e for e in server.executions(task["id"]) if e["run_id"] == run2["id"]]
    assert execution["status"] == "cancelled"
    again = server.post(f"/api/tasks/{task['id']}/runs/{run2['id']}/cancel")
    assert again.status_code == 409 and again.json()["error"]["code"] == "run_not_active"
    # Nothing is marked gone, now or after the runner had its chance.
    time.sleep(3)
    with server.sql.connect() as conn:
        gone = conn.execute(
            sa.text("SELECT count(*) FROM analysis_changes WHERE task_id = :t AND kind = 'gone'"),
            {"t": task["id"]},
        ).scalar()
    assert gone == 0
    assets = server.assets(port=port)
    assert assets and all(a.get("status", "open") == "open" for a in assets)
    # The task shows its newest run; a new run may start again.
    assert server.get(f"/api/tasks/{task['id']}").json()["task"]["status"] == "cancelled"
    assert server.post(f"/api/tasks/{task['id']}/runs").status_code == 201
