"""The default scan profile with real nmap on loopback listeners (issue 37).

An HTTP server with a title, a banner service and two TLS listeners with
certificates made here (one expiring in 5 days, one in 400) run on 127.0.0.1. A
task with the default profile (``standard``) is scanned by ``python -m app.agent
--once`` with no ``[agent]`` service settings: the assets must name the services,
carry the HTTP title and the certificates, and the search language must find the
short-lived certificate with ``cert.expires:<30d``.
"""

from __future__ import annotations

import json
import ssl
from contextlib import ExitStack

import pytest
from cryptography.hazmat.primitives import hashes

from tests.e2e.test_agent_nmap import run_agent
from tests.support.certificates import make_certificate, pem_files
from tests.support.listeners import (
    _Banner,
    _Quiet,
    _serve,
    _ThreadingHTTP,
    _ThreadingTCP,
    _TlsHTTP,
)
from tests.support.netmap_server import netmap_server
from tests.support.processes import wait_for

pytestmark = pytest.mark.e2e


def _tls_listener(stack: ExitStack, directory, certificate, key) -> int:
    directory.mkdir()
    cert_path, key_path = pem_files(certificate, key, directory)
    server = _TlsHTTP(("127.0.0.1", 0), _Quiet)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path)
    server.context = context
    _serve(stack, server)
    return server.server_address[1]


def test_the_default_profile_finds_services_titles_and_certificates(database_url, tmp_path):
    short, short_key = make_certificate("short.test", days=5, sans=("short.test", "127.0.0.1"))
    long, long_key = make_certificate("long.test", days=400, key_kind="rsa")
    with ExitStack() as stack:
        http_server = _ThreadingHTTP(("127.0.0.1", 0), _Quiet)
        _serve(stack, http_server)
        banner_server = _ThreadingTCP(("127.0.0.1", 0), _Banner)
        _serve(stack, banner_server)
        http_port = http_server.server_address[1]
        banner_port = banner_server.server_address[1]
        short_port = _tls_listener(stack, tmp_path / "short", short, short_key)
        long_port = _tls_listener(stack, tmp_path / "long", long, long_key)
        server = stack.enter_context(netmap_server(database_url, tmp_path))
        ports = [http_port, banner_port, short_port, long_port]
        task = server.create_task(["127.0.0.1"], ",".join(map(str, ports)))
        assert task["profile"] == "standard"
        agent = run_agent(
            server.url,
            server.scanner_token(),
            tmp_path,
            "--once",
            "--kinds",
            "ports",
            "--log-format",
            "json",
            config="[agent]\nbatch_size = 10\n",  # nothing about service detection
        )
        assert agent.returncode == 0, agent.stderr[-3000:]
        events = [json.loads(line) for line in agent.stderr.splitlines() if line.startswith("{")]
        assert events[-1]["event"] == "AgentExecutionSucceeded"

        def projected():
            items = server.assets(ip="127.0.0.1")
            return items if len(items) == 4 else None

        assets = {a["port"]: a for a in wait_for(projected, 90, "the projection of 4 endpoints")}
        assert assets[http_port]["service"] == "http"
        assert assets[banner_port]["service"] == "smtp"
        assert assets[short_port]["service"] == "https" and assets[long_port]["service"] == "https"

        def found(q: str) -> list[int]:
            response = server.get("/api/assets", params={"q": q, "limit": 500})
            assert response.status_code == 200, response.text
            return sorted(a["port"] for a in response.json()["items"])

        assert found('title:"netmap test"') == sorted([http_port, short_port, long_port])
        assert found("cert.expires:<30d") == [short_port]
        assert found("cert.expires:>300d") == [long_port]
        assert found("cert.subject:short.test cert.self_signed:true") == [short_port]
        assert found("cert.san:127.0.0.1") == [short_port]
        assert found("cert.key_type:rsa cert.key_bits:>=2048") == [long_port]
        assert found("cert.fingerprint:" + short.fingerprint(hashes.SHA256()).hex()) == [short_port]
        assert found("server:SimpleHTTP") == sorted([http_port, short_port, long_port])
        assert found("service:https -cert.expires:<30d") == [long_port]
        executions = server.executions(task["id"])
        assert executions[0]["status"] == "succeeded"
