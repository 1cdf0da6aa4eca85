"""The agent's failure paths against a real `netmap up` with real nmap (AGT-3, AGT-4).

* killed (SIGKILL) in the middle of its uploads, then restarted: it resumes
  from its spool with the same upload identity and every endpoint is stored once;
* its lease is lost while nmap runs: nmap's process group is stopped, nothing
  is reported, the spool is dropped;
* SIGTERM while nmap runs: after the grace period nmap is stopped and the
  execution is failed with the reason;
* nmap exits non-zero: the execution is failed with nmap's stderr and exit code;
* a 503 storm (through a proxy answering 503 + Retry-After): uploads wait and
  retry, and every endpoint is stored once;
* a DNS execution resolved through a local name server becomes dns_records and
  the follow-up task.

One server for the module (lease 10 s, so heartbeats come every ~3 s); every
test starts with no claimable work left by another.
"""

from __future__ import annotations

import json
import signal
import socket
import sys
from contextlib import contextmanager

import psutil
import pytest
import sqlalchemy as sa

from tests.support.agent_process import start_agent
from tests.support.database import unique_name
from tests.support.dns_server import dns_server
from tests.support.flaky_proxy import flaky_proxy
from tests.support.netmap_server import netmap_server
from tests.support.processes import LoggedProcess, base_env, wait_for

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(pg_server, template_db, tmp_path_factory):
    name = unique_name("netmap_agent")
    url = pg_server.create_database(name, template=template_db)
    directory = tmp_path_factory.mktemp("agent-server")
    with netmap_server(url, directory, NETMAP_SCAN_EXECUTION_LEASE_SECONDS="10") as running:
        engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        running.sql = engine  # type: ignore[attr-defined]
        running.token = running.scanner_token("faults")  # type: ignore[attr-defined]
        yield running
        engine.dispose()
    pg_server.drop_database(name)


@pytest.fixture(autouse=True)
def no_leftover_work(server):
    yield
    with server.sql.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET status = 'failed', finished_at = now(), "
                "last_error = 'test cleanup' WHERE status IN ('queued', 'running')"
            )
        )


def execution_of(server, task_id: int) -> dict:
    (execution,) = [e for e in server.executions(task_id) if e["kind"] == "ports"]
    return execution


def spooled(tmp_path) -> list:
    return list((tmp_path / "spool").rglob("execution-*"))


@contextmanager
def listening_sockets(count: int):
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sock.listen(8)
            sockets.append(sock)
        yield [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


SLOW_SCAN = '[agent]\nnmap_extra_args = ["--max-rate", "20"]\nshutdown_grace_seconds = 1\n'


def test_killed_mid_upload_then_restarted_stores_every_endpoint_once(server, tmp_path):
    with listening_sockets(300) as ports:
        # Ports only: service detection on hundreds of silent listeners takes minutes, and
        # these tests are about the upload protocol, not what runs on the ports.
        task = server.create_task(["127.0.0.1"], ",".join(map(str, ports)), profile="quick")
        config = "[agent]\nbatch_size = 5\n"
        first = start_agent(server, tmp_path, "first", config, "--once")
        try:
            wait_for(lambda: len(first.events("AgentBatchUploaded")) >= 3, 120, "3 batches")
            first.process.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        finally:
            first.stop()
        sent_before = first.events("AgentBatchUploaded")
        assert not any(b["is_final"] for b in sent_before), "killed too late: nothing to resume"
        assert spooled(tmp_path), "the spool keeps the interrupted execution"

        second = start_agent(server, tmp_path, "second", config, "--once")
        try:
            assert second.wait(timeout=300) == 0, second.stderr()[-3000:]
        finally:
            second.stop()
    (resumed,) = second.events("AgentExecutionResumed")
    assert resumed["execution_id"] == sent_before[0]["execution_id"]
    resent = second.events("AgentBatchUploaded")
    # What the server had confirmed comes back as saved 0: stored once, not twice.
    for before in sent_before:
        again = next(b for b in resent if b["batch_index"] == before["batch_index"])
        assert again["items"] == before["items"] and again["saved"] == 0
    assert resent[-1]["is_final"]
    execution = execution_of(server, task["id"])
    assert execution["status"] == "succeeded"
    assert execution["endpoint_count"] == 300
    results = server.get(f"/api/tasks/{task['id']}/results", params={"limit": 500}).json()
    assert results["total_endpoints"] == 300
    assert sorted(r["port"] for r in results["items"]) == sorted(ports)
    with server.sql.connect() as conn:
        uploads = conn.execute(
            sa.text(
                "SELECT upload_id, count(*) AS batches, count(DISTINCT batch_index) AS distinct_"
                " FROM scan_upload_receipts WHERE execution_id = :e GROUP BY upload_id"
            ),
            {"e": execution["id"]},
        ).all()
    assert len(uploads) == 1 and uploads[0].batches == uploads[0].distinct_
    assert not spooled(tmp_path)


def _scan_pid(agent: LoggedProcess) -> int:
    started = wait_for(lambda: agent.events("AgentScanStarted"), 60, "nmap to start")
    pid = started[0]["pid"]
    assert psutil.Process(pid).name() == "nmap"
    return pid


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_lease_lost_while_nmap_runs_stops_nmap_and_reports_nothing(server, tmp_path):
    task = server.create_task(["127.0.0.1"], "1-3000")
    agent = start_agent(server, tmp_path, "agent", SLOW_SCAN, "--once")
    try:
        nmap = _scan_pid(agent)
        execution = execution_of(server, task["id"])
        with server.sql.begin() as conn:  # the lease runs out (as if the agent had stalled)
            conn.execute(
                sa.text(
                    "UPDATE scan_executions SET lease_expires_at = now() - interval '1 second' "
                    "WHERE id = :e"
                ),
                {"e": execution["id"]},
            )
        assert agent.wait(timeout=60) == 4, agent.stderr()[-3000:]  # EXIT_LEASE_LOST
    finally:
        agent.stop()
    assert _gone(nmap)
    assert agent.events("AgentLeaseLost") and agent.events("AgentExecutionLeaseLost")
    assert not agent.events("AgentExecutionFailed")
    assert "nmap" not in (execution_of(server, task["id"])["last_error"] or "")
    assert not spooled(tmp_path)


def test_sigterm_lets_the_scan_finish_for_the_grace_period_then_fails_it(server, tmp_path):
    task = server.create_task(["127.0.0.1"], "1-3000")
    agent = start_agent(server, tmp_path, "agent", SLOW_SCAN)  # not --once: a long-running agent
    try:
        nmap = _scan_pid(agent)
        agent.process.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=60) == 3, agent.stderr()[-3000:]  # EXIT_FAILED
    finally:
        agent.stop()
    assert _gone(nmap)
    assert agent.events("AgentStopping")[0]["reason"] == "SIGTERM"
    execution = execution_of(server, task["id"])
    assert execution["status"] == "failed"
    assert "SIGTERM" in execution["last_error"] and "1s" in execution["last_error"]
    assert not agent.events("AgentExecutionClaimed")[1:]  # nothing claimed after the signal
    assert not spooled(tmp_path)


def test_nmap_exiting_non_zero_fails_the_execution_with_its_stderr(server, tmp_path):
    task = server.create_task(["127.0.0.1"], "22")
    config = '[agent]\nnmap_extra_args = ["--no-such-nmap-option"]\n'
    agent = start_agent(server, tmp_path, "agent", config, "--once")
    try:
        assert agent.wait(timeout=120) == 3, agent.stderr()[-3000:]
    finally:
        agent.stop()
    execution = execution_of(server, task["id"])
    assert execution["status"] == "failed"
    assert "exited with code 255" in execution["last_error"]
    assert "no-such-nmap-option" in execution["last_error"]  # nmap's own complaint
    (failed,) = agent.events("AgentExecutionFailed")
    assert failed["execution_id"] == execution["id"]
    assert json.dumps(failed).count(server.token) == 0
    assert not spooled(tmp_path)


def test_a_503_storm_is_waited_out_honouring_retry_after(server, tmp_path):
    def refuse(path: str, count: int) -> bool:
        return path.endswith("/uploads") and count < 2  # every batch refused twice

    with listening_sockets(12) as ports, flaky_proxy(server.url, refuse) as (url, log):
        # Ports only: service detection on hundreds of silent listeners takes minutes, and
        # these tests are about the upload protocol, not what runs on the ports.
        task = server.create_task(["127.0.0.1"], ",".join(map(str, ports)), profile="quick")
        agent = start_agent(
            server, tmp_path, "agent", "[agent]\nbatch_size = 5\n", "--once", url=url
        )
        try:
            assert agent.wait(timeout=180) == 0, agent.stderr()[-3000:]
        finally:
            agent.stop()
    retries = agent.events("AgentUploadRetry")
    assert len(retries) == 6  # three batches (5 + 5 + final 2), each refused twice
    assert {r["delay_seconds"] for r in retries} == {1.0}  # the server's Retry-After
    assert sum(line.startswith("503") for line in log) == 6
    batches = agent.events("AgentBatchUploaded")
    assert [(b["items"], b["saved"]) for b in batches] == [(5, 5), (5, 5), (2, 2)]
    execution = execution_of(server, task["id"])
    assert execution["status"] == "succeeded" and execution["endpoint_count"] == 12


def test_a_dns_execution_resolves_through_the_configured_name_server(server, tmp_path):
    zone = {
        ("www.netmap-test.example", "A"): ["127.0.0.1"],
        ("www.netmap-test.example", "AAAA"): ["::1"],
        ("alias.netmap-test.example", "CNAME"): ["www.netmap-test.example"],
    }
    with dns_server(zone) as nameserver:
        task = server.create_task(["alias.netmap-test.example"], "80")
        config = f'[agent]\ndns_nameservers = ["{nameserver}"]\n'
        agent = start_agent(server, tmp_path, "agent", config, "--once", "--kinds", "dns")
        try:
            assert agent.wait(timeout=120) == 0, agent.stderr()[-3000:]
        finally:
            agent.stop()
    (execution,) = [e for e in server.executions(task["id"]) if e["kind"] == "dns"]
    assert execution["status"] == "succeeded"
    assert execution["observation_count"] == 3  # CNAME, A, AAAA
    detail = server.get(f"/api/tasks/{task['id']}").json()["task"]
    (child_id,) = detail["child_task_ids"]
    child = server.get(f"/api/tasks/{child_id}").json()["task"]
    assert sorted(child["targets"]) == ["127.0.0.1", "::1"]
    assert child["ports"] == "80"


def test_a_wrong_token_ends_the_agent_with_a_clear_error(server, tmp_path):
    config_path = tmp_path / "agent.toml"
    config_path.write_text("")
    agent = LoggedProcess(
        [
            sys.executable, "-m", "app.agent", "--server", server.url, "--spool",
            str(tmp_path / "spool"), "--config", str(config_path), "--log-format", "json",
        ],
        base_env(NETMAP_SCANNER_TOKEN="nms_" + "x" * 43),
        tmp_path,
        "agent",
    )  # fmt: skip
    try:
        assert agent.wait(timeout=60) == 1
    finally:
        agent.stop()
    (refused,) = agent.events("AgentClaimRejected")
    assert refused["status"] == 401
    assert "nms_" not in agent.stderr()
