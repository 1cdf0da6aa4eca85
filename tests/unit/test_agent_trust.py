"""The agent does not trust its server (AGT-1, SCN-7): identifiers from a claim are
checked before they name a path or a URL, the spool never reaches outside its root,
targets and ports follow the server's own rules plus the local allowlist, and a
plain-http server off loopback needs --insecure-http. A fake server on loopback plays
the hostile side; the agent is the real one."""

from __future__ import annotations

import io
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from click.testing import CliRunner

from app.agent.cli import agent as agent_command
from app.agent.client import Execution, MalformedClaim
from app.agent.events import EventLog
from app.agent.loop import EXIT_FAILED, EXIT_OK, Agent
from app.agent.spool import ExecutionSpool, Spool, SpoolPathError
from app.agent.targets import TargetRefused, check_execution
from app.config import ConfigError, ScanSettings, load_settings

TOKEN = "6f1c1f0e-5f7a-4c39-9d55-5d8e0e9b7c11"


def claim(**changes):
    execution = {
        "id": 41,
        "task_id": 7,
        "kind": "ports",
        "claim_token": TOKEN,
        "lease_expires_at": "2099-01-01T00:00:00+00:00",
        "targets": ["192.0.2.1"],
        "ports": "80",
        "transports": ["tcp"],
        "attempt": 1,
    }
    execution.update(changes)
    return execution


class FakeServer:
    """Answers the scanner protocol from a script: ``claims`` in order (then 204), and
    409 lease_lost for everything about an execution. Records every request."""

    def __init__(self, claims):
        self.claims = list(claims)
        self.requests: list[tuple[str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                fake.requests.append((self.path, body))
                if self.path == "/api/scanner/claim":
                    if not fake.claims:
                        self.send_response(204)
                        self.end_headers()
                        return
                    self._json(200, fake.claims.pop(0))
                elif self.path.endswith("/fail"):
                    self._json(200, {"status": "failed"})
                else:
                    self._json(409, {"error": {"code": "lease_lost", "message": "gone"}})

            def _json(self, status, payload):
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def run_agent(tmp_path, claims, prepare=None, **agent_values):
    fake = FakeServer(claims)
    if prepare is not None:
        prepare(fake.url)
    settings, _ = load_settings(
        env={}, overrides={"agent": {"idle_backoff_max_seconds": 1.0, **agent_values}}
    )
    stream = io.StringIO()
    runner = Agent(
        server=fake.url,
        token="t",
        settings=settings.agent,
        kinds=["ports"],
        spool_root=tmp_path / "spool",
        log=EventLog("json", stream),
        once=True,
        observation_source=lambda execution: iter(()),
        scan_settings=settings.scan,
    )
    try:
        status = runner.run()
    finally:
        fake.close()
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    return status, events, fake


@pytest.mark.parametrize(
    "token", ["/../../.", "../../..", "6f1c1f0e/../../x", "6F1C1F0E-5F7A-4C39-9D55-5D8E0E9B7C1"]
)
def test_a_claim_token_that_is_not_a_uuid_is_refused_and_the_spool_survives(tmp_path, token):
    (tmp_path / "spool").mkdir()
    keep = tmp_path / "spool" / "other-file"
    keep.write_text("not the agent's")
    status, events, fake = run_agent(tmp_path, [{"execution": claim(claim_token=token)}])
    assert keep.read_text() == "not the agent's"
    assert status == EXIT_OK  # retried, then the server had no work
    malformed = [e for e in events if e["event"] == "AgentClaimMalformed"]
    assert len(malformed) == 1 and "claim_token is not a UUID" in malformed[0]["error"]
    # Nothing about the bad execution was sent back: its identifiers were never used.
    assert [path for path, _ in fake.requests] == ["/api/scanner/claim"] * 2


@pytest.mark.parametrize(
    "answer, message",
    [
        ({"execution": claim(id="41/../../x")}, "'id' must be a positive integer"),
        ({"execution": claim(id=True)}, "'id' must be a positive integer"),
        ({"execution": claim(attempt=-1)}, "'attempt' must be a positive integer"),
        ({"execution": claim(kind="shell")}, "'kind' must be one of"),
        ({"execution": claim(targets="10.0.0.0/8")}, "'targets' must be a list of strings"),
        ({"execution": claim(transports=["sctp"])}, "'transports' must hold tcp/udp"),
        ({"execution": "nope"}, "not a JSON object"),
        ({"no": "execution"}, "has no 'execution'"),
        ([1, 2], "has no 'execution'"),
    ],
)
def test_a_malformed_claim_is_a_clear_error_then_a_retry_with_backoff(tmp_path, answer, message):
    status, events, _fake = run_agent(tmp_path, [answer, answer])
    assert status == EXIT_OK
    malformed = [e for e in events if e["event"] == "AgentClaimMalformed"]
    assert len(malformed) == 2 and message in malformed[0]["error"]
    assert malformed[1]["delay_seconds"] > malformed[0]["delay_seconds"]  # backing off


def test_a_lost_lease_removes_only_the_executions_own_directory(tmp_path):
    (tmp_path / "spool").mkdir()
    keep = tmp_path / "spool" / "other-file"
    keep.write_text("x")
    status, _events, _fake = run_agent(tmp_path, [{"execution": claim()}])
    assert status == 4  # EXIT_LEASE_LOST
    assert keep.exists()
    assert not list((tmp_path / "spool").rglob("execution-*"))


def test_spool_paths_are_built_from_validated_parts_and_stay_under_the_root(tmp_path):
    spool = Spool(tmp_path, "http://server")
    bad = Execution.__new__(Execution)
    object.__setattr__(bad, "__dict__", {**claim(claim_token="../../..")})
    with pytest.raises(SpoolPathError):
        spool.create(bad, "u", "s")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    with pytest.raises(SpoolPathError):
        ExecutionSpool(outside, spool.root)
    with pytest.raises(SpoolPathError):
        ExecutionSpool(spool.root / "execution-1-1-6f1c1f0e" / ".." / "..", spool.root)
    good = spool.create(Execution.from_claim(claim()), "u", "s")
    assert good.directory.parent == spool.root.resolve()
    with pytest.raises(SpoolPathError):
        good.file("../escape")
    # A directory replaced by a link to elsewhere is not followed when removing.
    good.remove()
    (spool.root / "execution-1-1-6f1c1f0e").symlink_to(outside)
    assert spool.pending() == [] and outside.exists()


def test_a_corrupt_spool_state_is_dropped_not_resumed(tmp_path):
    left = []

    def corrupt_spool(url):
        spool = Spool(tmp_path / "spool", url)
        left.append(spool.create(Execution.from_claim(claim()), "u", "s"))
        bad = {"execution": claim(claim_token="/../.."), "upload_id": "u"}
        left[0].state_path.write_text(json.dumps(bad))
        spool.close()  # that agent is gone

    _status, events, _fake = run_agent(tmp_path, [], prepare=corrupt_spool)
    assert "AgentSpoolUnreadable" in [e["event"] for e in events]
    assert not left[0].directory.exists() and left[0].root.exists()


# --- targets: the server's rules, on the scan host ---------------------------------

LOOPBACK_ALLOWED = ScanSettings(special_use_targets=("loopback", "private"))


@pytest.mark.parametrize(
    "targets, reason",
    [
        (["10.0.0.1\n8.8.8.8"], "control characters or whitespace"),
        (["10.0.0.1 8.8.8.8"], "control characters or whitespace"),
        (["10.0.0.1\t"], None),  # surrounding whitespace is trimmed, as on the server
        (["169.254.169.254"], "addresses are not scannable"),
        (["-iR"], "not"),
    ],
)
def test_targets_follow_the_servers_rules(targets, reason):
    if reason is None:
        assert check_execution("ports", targets, "80", LOOPBACK_ALLOWED).targets == ["10.0.0.1"]
        return
    with pytest.raises(TargetRefused, match=reason):
        check_execution("ports", targets, "80", LOOPBACK_ALLOWED)


@pytest.mark.parametrize("ports", ["0", "65536", "80,99999", "1-2-3", "-p", "80;id"])
def test_ports_outside_1_to_65535_or_malformed_are_refused(ports):
    with pytest.raises(TargetRefused, match="ports"):
        check_execution("ports", ["192.0.2.1"], ports, LOOPBACK_ALLOWED)


def test_ports_are_normalised_before_reaching_nmap():
    checked = check_execution("ports", ["192.0.2.1"], " 80 ,\n22, 21-23", LOOPBACK_ALLOWED)
    assert checked.ports == "21-23,80"


def test_the_allowlist_admits_nothing_outside_it():
    allowed = ("192.0.2.0/24", "2001:db8::/32")
    ok = check_execution("ports", ["192.0.2.0/28", "2001:db8::1"], "80", LOOPBACK_ALLOWED, allowed)
    assert ok.targets == ["192.0.2.0/28", "2001:db8::1"]
    for outside in (["0.0.0.0/0"], ["10.0.0.0/8"], ["8.8.8.8"], ["192.0.2.0/23"], ["example.com"]):
        with pytest.raises(TargetRefused):
            check_execution(
                "ports", outside, "80", ScanSettings(special_use_targets=SPECIAL), allowed
            )


SPECIAL = ("loopback", "private", "unspecified")


def test_an_execution_outside_the_allowlist_is_failed_with_the_reason_and_not_scanned(tmp_path):
    scanned = []
    status, events, fake = run_agent(
        tmp_path,
        [{"execution": claim(targets=["8.8.8.8"])}],
        allowed_networks=["192.0.2.0/24"],
    )
    assert status == EXIT_FAILED and not scanned
    (fail,) = [body for path, body in fake.requests if path.endswith("/fail")]
    assert "outside [agent] allowed_networks" in fail["reason"] and fail["claim_token"] == TOKEN
    assert "AgentExecutionRefused" in [e["event"] for e in events]


def test_an_allowlist_entry_that_is_not_a_network_is_a_config_error():
    with pytest.raises(ConfigError, match=r"agent\.allowed_networks"):
        load_settings(env={}, overrides={"agent": {"allowed_networks": ["10.0.0.0/33"]}})


# --- transport -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "server, refused",
    [
        ("http://netmap.example", True),
        ("http://192.0.2.10:8000", True),
        ("http://127.0.0.1:9", False),
        ("http://[::1]:9", False),
        ("http://localhost:9", False),
        ("https://netmap.example", False),
    ],
)
def test_plain_http_off_loopback_needs_insecure_http(server, refused, tmp_path):
    env = {"NETMAP_SCANNER_TOKEN": "t", "NETMAP_CONFIG": ""}
    args = ["--server", server, "--spool", str(tmp_path), "--kinds", "nope"]
    done = CliRunner().invoke(agent_command, args, env=env)
    if refused:
        assert done.exit_code == 2 and "--insecure-http" in done.output
        done = CliRunner().invoke(agent_command, [*args, "--insecure-http"], env=env)
    # Past the transport check, the bad --kinds is what stops it.
    assert done.exit_code == 2 and "kinds are" in done.output, done.output


def test_claim_parsing_accepts_the_documented_example():
    execution = Execution.from_claim(claim())
    assert execution.id == 41 and execution.claim_token == TOKEN
    with pytest.raises(MalformedClaim):
        Execution.from_claim(claim(claim_token=TOKEN.upper()))


@pytest.mark.parametrize(
    "target", ["127.0.0.1", "::1", "169.254.169.254", "fd00:ec2::254", "fe80::1"]
)
def test_the_agent_applies_the_special_use_policy_of_its_own_settings(target):
    with pytest.raises(TargetRefused, match="special_use_targets"):
        check_execution("ports", [target], "80", ScanSettings())
    assert check_execution("ports", ["10.0.0.1"], "80", ScanSettings()).targets == ["10.0.0.1"]


def test_the_agent_refuses_the_whole_internet_for_its_size():
    # It touches every special range too; its size is what the refusal names.
    with pytest.raises(TargetRefused, match="the limit per task is"):
        check_execution("ports", ["0.0.0.0/0"], "80", ScanSettings())


def test_two_agents_never_share_a_spool(tmp_path):
    """A second agent on the same spool resumed the first one's live execution and ran
    its scan again; it is refused, and may start once the first is done."""
    from app.agent.spool import SpoolInUse

    first = Spool(tmp_path / "spool", "http://server")
    with pytest.raises(SpoolInUse, match=rf"in use by another agent \(pid {os.getpid()}\)"):
        Spool(tmp_path / "spool", "http://server")
    Spool(tmp_path / "spool", "http://other-server").close()  # another server's is its own
    first.close()
    Spool(tmp_path / "spool", "http://server").close()
