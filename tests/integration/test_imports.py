"""Importing result files into a task through the upload pipeline (AGT-7).

Real PostgreSQL, the real app: an import is an execution of kind ``import``
with receipts, a final and a projection-outbox row; a bad file answers 400
naming where and writes nothing; past ``[agent] import_max_bytes`` the answer
is 413.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.support.scanner_protocol import make_task
from tests.support.settings import make_settings
from tests.support.sql import rows, scalar

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agent"
LIMIT = 512 * 1024


@pytest.fixture
def settings(database_url, tmp_path):
    return make_settings(database_url, tmp_path, agent={"import_max_bytes": LIMIT})


def _import(user, task_id: int, data: bytes, fmt: str, **params: str):
    query = "&".join(f"{k}={v}" for k, v in {"format": fmt, **params}.items())
    return user.post(
        f"/api/tasks/{task_id}/imports?{query}",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
        json=None,
    )


def _nothing_written(task_id: int) -> None:
    assert scalar("SELECT count(*) FROM scan_executions WHERE kind = 'import'") == 0
    assert scalar("SELECT count(*) FROM scan_upload_receipts") == 0
    assert scalar("SELECT count(*) FROM search_facts") == 0


def test_nmap_xml_import_becomes_an_execution_through_the_pipeline(api):
    user = api.user()
    task = make_task(user, targets=("127.0.0.1",), ports="1-65535")
    data = (FIXTURES / "nmap-many-ports.xml").read_bytes()
    response = _import(user, task["id"], data, "nmap-xml", observed_at="import")
    assert response.status_code == 201, response.get_json()
    result = response.get_json()["import"]
    assert result["observations"] == 300  # open ports only ([agent] report_states)
    assert result["bytes"] == len(data)
    executions = {
        e["kind"]: e for e in user.get(f"/api/tasks/{task['id']}/executions").get_json()["items"]
    }
    imported = executions["import"]
    assert imported["id"] == result["execution_id"]
    assert imported["status"] == "succeeded"
    assert imported["endpoint_count"] == 300
    receipts = rows(
        "SELECT batch_index, is_final, status, observation_count FROM scan_upload_receipts "
        "WHERE execution_id = :e ORDER BY batch_index",
        e=imported["id"],
    )
    assert [(r.is_final, r.status) for r in receipts] == [(True, "confirmed")]
    assert (
        scalar(
            "SELECT count(*) FROM scan_projection_outbox WHERE execution_id = :e", e=imported["id"]
        )
        == 1
    )
    # The scan the task queued is untouched: still claimable by a scanner.
    assert executions["ports"]["status"] == "queued"


def test_multipart_masscan_and_naabu_imports(api):
    user = api.user()
    # The task's scope covers the fixtures' rows: imports are checked against it.
    task = user.post(
        "/api/tasks",
        json={
            "name": "imports",
            "targets": ["127.0.0.0/24", "::1"],
            "ports": "1-65535",
            "transports": ["tcp", "udp"],
        },
    ).get_json()["task"]
    masscan = (FIXTURES / "masscan-1.3.json").read_bytes()
    # The fixture's times are fixed; "import" (now) keeps them inside the accepted window.
    response = user.post(
        f"/api/tasks/{task['id']}/imports?observed_at=import",
        data={"format": "masscan-json", "file": (io.BytesIO(masscan), "scan.json")},
        content_type="multipart/form-data",
        json=None,
    )
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["import"]["observations"] == 6
    naabu = (FIXTURES / "naabu.jsonl").read_bytes()
    response = _import(user, task["id"], naabu, "naabu-jsonl", observed_at="import")
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["import"]["observations"] == 3


def test_a_truncated_file_is_refused_naming_line_and_offset_and_writes_nothing(api):
    user = api.user()
    task = make_task(user, targets=("127.0.0.1",), ports="22")
    data = (FIXTURES / "nmap-many-ports.xml").read_bytes()
    cut = data[: data.index(b"<port ", len(data) // 2) + 20]
    response = _import(user, task["id"], cut, "nmap-xml")
    assert response.status_code == 400
    error = response.get_json()["error"]
    assert error["code"] == "invalid_import_file"
    assert error["details"]["line"] > 1 and 0 < error["details"]["byte_offset"] <= len(cut)
    assert "byte offset" in error["message"]
    _nothing_written(task["id"])


def test_a_bad_record_late_in_the_file_writes_nothing(api):
    user = api.user()
    task = make_task(user, targets=("127.0.0.1",), ports="22")
    good = b"".join(b'{"ip":"127.0.0.1","port":%d}\n' % p for p in range(1, 7001))
    bad = good + b'{"ip":"127.0.0.1","port":70000}\n'
    response = _import(user, task["id"], bad, "naabu-jsonl", observed_at="import")
    assert response.status_code == 400
    details = response.get_json()["error"]["details"]
    assert details["line"] == 7001 and details["byte_offset"] == len(good)
    assert details["element"] == "field port"
    _nothing_written(task["id"])
    # An observation the upload rules refuse (too old) is named by its position.
    old = b'{"ip":"127.0.0.1","port":22,"timestamp":"2001-01-01T00:00:00Z"}\n'
    response = _import(user, task["id"], old, "naabu-jsonl")
    assert response.status_code == 400
    assert response.get_json()["error"]["details"]["observation"] == 1
    assert response.get_json()["error"]["details"]["field"] == "observed_at"
    _nothing_written(task["id"])


def test_size_limit_format_and_ownership(api):
    user = api.user()
    task = make_task(user, targets=("127.0.0.1",), ports="22")
    big = b'{"ip":"127.0.0.1","port":22}\n' * (LIMIT // 28 + 10)
    response = _import(user, task["id"], big, "naabu-jsonl")
    assert response.status_code == 413
    assert response.get_json()["error"]["details"]["limit_bytes"] == LIMIT
    response = _import(user, task["id"], b"{}", "nessus")
    assert response.status_code == 400
    assert response.get_json()["error"]["details"]["field"] == "format"
    other = api.user()
    line = b'{"ip":"127.0.0.1","port":22}\n'
    assert _import(other, task["id"], line, "naabu-jsonl").status_code == 404
    assert _import(user, 999999, line, "naabu-jsonl").status_code == 404
    _nothing_written(task["id"])


def test_netmap_import_command_uses_the_same_service(api, database_url):
    import json

    from tests.integration.test_cli import run_cli

    user = api.user()
    task = make_task(user, targets=("127.0.0.1",), ports="1-65535")
    fixture = FIXTURES / "nmap-sv-loopback.xml"
    done = run_cli(
        database_url,
        "import",
        str(fixture),
        "--task",
        str(task["id"]),
        "--format",
        "nmap-xml",
        "--observed-at",
        "import",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["observations"] == 3 and result["bytes"] == fixture.stat().st_size
    # How far it is, in words, on stderr (stdout stays the one JSON object).
    said = [line for line in done.stderr.splitlines() if line.startswith("netmap: ")]
    assert said == [
        f"netmap: checking nmap-sv-loopback.xml (nmap-xml) against task {task['id']}",
        "netmap: 3 observations to import",
        "netmap: imported 3 of 3 observations (1 batch)",
    ]
    # Nothing else but warnings: the pipeline's per-batch events drowned those lines.
    assert not [line for line in done.stderr.splitlines() if '"level": "info"' in line]
    status = scalar(
        "SELECT status FROM scan_executions WHERE id = :e AND kind = 'import'",
        e=result["execution_id"],
    )
    assert status == "succeeded"
    bad = run_cli(database_url, "import", str(fixture), "--task", "999999", "--format", "nmap-xml")
    assert bad.returncode != 0 and "task_not_found" in bad.stderr


def test_imports_are_checked_against_the_tasks_scope(api):
    """Rows outside the task's targets or ports are refused, listing the first of them;
    only an administrator may import such a file with scope=ignore."""
    user = api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="80")
    inside = '{"ip": "192.0.2.1", "port": 80, "timestamp": "2026-12-01T00:00:00Z"}\n'
    outside = (
        '{"ip": "8.8.8.8", "port": 80, "timestamp": "2026-12-01T00:00:00Z"}\n'
        '{"ip": "192.0.2.2", "port": 5000, "timestamp": "2026-12-01T00:00:00Z"}\n'
    )
    data = (inside + outside).encode()
    refused = _import(user, task["id"], data, "naabu-jsonl", observed_at="import")
    assert refused.status_code == 400
    error = refused.get_json()["error"]
    assert error["code"] == "import_out_of_scope"
    rows = error["details"]["outside"]
    assert [(r["observation"], r["ip"], r["port"], r["fields"]) for r in rows] == [
        (2, "8.8.8.8", 80, ["ip"]),
        (3, "192.0.2.2", 5000, ["port"]),
    ]
    assert "8.8.8.8 port 80/tcp" in error["message"]
    _nothing_written(task["id"])
    forbidden = _import(user, task["id"], data, "naabu-jsonl", observed_at="import", scope="ignore")
    assert forbidden.status_code == 403
    assert _import(user, task["id"], data, "naabu-jsonl", scope="nope").status_code == 400
    admin = api.admin()
    accepted = _import(admin, task["id"], data, "naabu-jsonl", observed_at="import", scope="ignore")
    assert accepted.status_code == 201, accepted.get_json()
    assert accepted.get_json()["import"]["observations"] == 3
    # Rows inside the scope are imported without asking.
    ok = _import(user, task["id"], inside.encode(), "naabu-jsonl", observed_at="import")
    assert ok.status_code == 201


def test_a_masscan_x509_banner_makes_the_certificate_searchable(api, settings):
    from app.projection.slices import ProjectionWorker
    from app.search.postgres_store import PostgresStore
    from tests.support.certificates import make_certificate
    from tests.support.projection import drain
    from tests.unit.test_agent_parsers import _der_base64

    user = api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="443")
    certificate, _ = make_certificate("shop.example.test")
    # As masscan --banners writes it: the port's state, then the banner, in the same
    # second. The two tied on time and the state record could win, certificate lost.
    state = (
        '{"ip": "192.0.2.7", "timestamp": "1764633600", "ports": [{"port": 443, "proto": "tcp", '
        '"status": "open", "reason": "syn-ack", "ttl": 64}]}'
    )
    record = (
        '{"ip": "192.0.2.7", "timestamp": "1764633600", "ports": [{"port": 443, "proto": "tcp", '
        f'"service": {{"name": "X509", "banner": "{_der_base64(certificate)}"}}}}]}}'
    )
    response = _import(
        user,
        task["id"],
        f"[\n{state},\n{record}\n]\n".encode(),
        "masscan-json",
        observed_at="import",
    )
    assert response.status_code == 201, response.get_json()
    store = PostgresStore(settings)
    try:
        drain(ProjectionWorker(settings, store))
    finally:
        store.close()
    found = user.get('/api/assets?q=cert.subject:"shop.example.test"').get_json()["items"]
    assert [(a["ip"], a["port"]) for a in found] == [("192.0.2.7", 443)]
    assert "tls" in found[0]["tags"]
