"""`netmap diagnostics` (OPS-3): the archive's contents, and no configured secret in it."""

from __future__ import annotations

import json
import subprocess
import zipfile

import sqlalchemy as sa

from app.db import transaction
from tests.integration.ops.test_config_check import SECRET_KEY, SECRETS, assert_no_secret
from tests.support.processes import base_env, netmap_command


def test_diagnostics_archive_is_complete_and_redacted(database_url, tmp_path, engine, api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "d", "targets": ["192.0.2.1"], "ports": "80"})
    scanner.claim()
    with transaction() as conn:
        # An error text that quotes secrets, as a careless library message might.
        conn.execute(
            sa.text(
                "INSERT INTO runner_periodic_jobs (name, last_error, last_finished_at) "
                "VALUES ('diag-test', :error, now())"
            ),
            {
                "error": f"ConnectionError: https://elastic:{SECRETS['es_password']}@es.example:9200"
                f" rejected (api key {SECRETS['es_api_key']})"
            },
        )
    log = tmp_path / "runner.log"
    log.write_text(
        "\n".join(
            [
                json.dumps({"level": "info", "event": "RunnerStarted"}),
                "not json",
                json.dumps(
                    {
                        "level": "error",
                        "event": "JobFailed",
                        "error": f"smtp login with {SECRETS['smtp_password']} refused",
                    }
                ),
            ]
        )
    )
    out = tmp_path / "diag.zip"
    env = base_env(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_DATA_DIR=str(tmp_path / "var"),
        NETMAP_SECRET_KEY=SECRET_KEY,
        NETMAP_SMTP_PASSWORD=SECRETS["smtp_password"],
        NETMAP_ELASTICSEARCH_PASSWORD=SECRETS["es_password"],
        NETMAP_ELASTICSEARCH_API_KEY=SECRETS["es_api_key"],
        NETMAP_TRAFFIC_TOKEN=SECRETS["ingest_token"],
    )
    done = subprocess.run(
        netmap_command("diagnostics", "--out", str(out), "--events", str(log)),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    with zipfile.ZipFile(out) as archive:
        names = set(archive.namelist())
        members = {name: archive.read(name).decode() for name in names}
    assert names >= {
        "versions.json",
        "config_check.json",
        "migrations.json",
        "queues.json",
        "leases.json",
        "recent_errors.json",
        "slow_sql.json",
        "resources_last_hour.json",
    }
    versions = json.loads(members["versions.json"])
    assert (
        versions["postgresql"] and versions["python"] and versions["search_store"] == "postgresql"
    )
    assert json.loads(members["migrations.json"])["at_head"] is True
    queues = {q["queue"]: q for q in json.loads(members["queues.json"])}
    assert {"scan_projection_outbox", "scan_analysis_queue"} <= set(queues)
    leases = {entry["table"]: entry for entry in json.loads(members["leases.json"])}
    assert leases["scan_executions"]["live"] == 1
    assert "runner_periodic_jobs" in leases
    errors = json.loads(members["recent_errors.json"])
    assert any("ConnectionError" in e["error"] and "<redacted>" in e["error"] for e in errors)
    assert json.loads(members["slow_sql.json"])["reason"] == "extension missing"
    events = json.loads(members["recent_events.json"])
    assert [e["event"] for e in events["log_file"]] == ["JobFailed"]
    assert "<redacted>" in events["log_file"][0]["error"]
    for text in (*members.values(), done.stdout, done.stderr):
        assert_no_secret(text)
