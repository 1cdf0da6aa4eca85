"""Result exports end to end: request, build under a lease, download, delete, expire (EXP-7..10).

Results get in through the scanner protocol (tests/support/scanner_protocol);
builds run the runner's own job kind in-process; downloads go through the
signed link the API hands out.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import threading
import time
import zipfile

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.exports import records
from app.exports.service import expire_exports
from app.object_store import open_object_store
from jobs.base import JobContext
from jobs.exports import ExportBuildJob
from tests.support.scanner_protocol import claim, make_task, observation


def _context(settings) -> JobContext:
    return JobContext(
        settings=settings, worker_id=0, stopping=threading.Event(), cancelled=threading.Event()
    )


def _scanned_task(api, user=None, *, hosts: int = 14):
    """A task whose one execution succeeded with ``hosts`` x 2 endpoints."""
    user = user or api.user()
    task = make_task(user, targets=("192.0.2.0/28",), ports="22,443")
    upload = claim(api.scanner())
    observations = [
        observation(f"192.0.2.{i}", port, service={"name": "ssh" if port == 22 else "https"})
        for i in range(1, hosts + 1)
        for port in (22, 443)
    ]
    assert upload.batch(0, observations[:10]).status_code == 200
    assert upload.final(1, observations[10:]).status_code == 200
    return user, task, observations


def _build_all(settings, host: str = "test-host") -> list[int]:
    job = ExportBuildJob(settings, host=host)
    built = []
    ctx = _context(settings)
    while (work := job.claim(ctx)) is not None:
        job.run(ctx, work)
        built.append(work.id)
    return built


def _download(session, export_id: int) -> bytes:
    body = session.get(f"/api/exports/{export_id}").get_json()["export"]
    assert body["status"] == "ready", body
    response = session.client.get(body["download_url"])
    assert response.status_code == 200
    return response.data


def _export_count() -> int:
    with transaction() as conn:
        return conn.execute(sa.text("SELECT count(*) FROM exports")).scalar_one()


def test_zip_export_end_to_end_with_manifest_checksums(api, settings):
    user, task, observations = _scanned_task(api)
    created = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "zip"})
    assert created.status_code == 202, created.get_json()
    export = created.get_json()["export"]
    assert (export["status"], export["format"], export["download_url"]) == ("queued", "zip", None)

    assert _build_all(settings) == [export["id"]]
    described = user.get(f"/api/exports/{export['id']}").get_json()["export"]
    assert described["rows"] == len(observations)
    archive = zipfile.ZipFile(io.BytesIO(_download(user, export["id"])))
    assert described["size"] > 0
    assert archive.namelist() == ["endpoints.csv", "endpoints.jsonl", "manifest.json"]
    # Every member is dated when it was made (the CSV was dated 1980-01-01).
    assert {info.date_time[0] for info in archive.infolist()} == {time.localtime().tm_year}
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["task"] == {"id": task["id"], "name": task["name"]}
    assert manifest["executions"] == described["executions"] and len(manifest["executions"]) == 1
    for name in ("endpoints.csv", "endpoints.jsonl"):
        data = archive.read(name)
        assert manifest["members"][name]["sha256"] == hashlib.sha256(data).hexdigest()
        assert manifest["members"][name]["bytes"] == len(data)
        assert manifest["members"][name]["rows"] == len(observations)
    rows = list(csv.DictReader(io.StringIO(archive.read("endpoints.csv").decode())))
    assert sorted((r["ip"], int(r["port"])) for r in rows) == sorted(
        (o["ip"], o["port"]) for o in observations
    )
    lines = [json.loads(x) for x in archive.read("endpoints.jsonl").decode().splitlines()]
    assert {(x["ip"], x["port"], x["service"]) for x in lines} == {
        (o["ip"], o["port"], o["service"]["name"]) for o in observations
    }


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_csv_and_jsonl_exports_hold_every_endpoint(api, settings, fmt):
    # A small page size makes the build walk several keyset pages.
    settings = settings.replace(exports={"page_size": 10})
    user, task, observations = _scanned_task(api)
    export_id = user.post(f"/api/tasks/{task['id']}/exports", json={"format": fmt}).get_json()[
        "export"
    ]["id"]
    _build_all(settings)
    data = _download(user, export_id).decode()
    if fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(data)))
        found = sorted((r["ip"], int(r["port"]), r["task_id"]) for r in rows)
        assert found == sorted((o["ip"], o["port"], str(task["id"])) for o in observations)
    else:
        items = [json.loads(line) for line in data.splitlines()]
        assert sorted((i["ip"], i["port"]) for i in items) == sorted(
            (o["ip"], o["port"]) for o in observations
        )


def test_bad_input_is_a_clear_4xx_and_queues_nothing(api):
    user, task, _ = _scanned_task(api)
    path = f"/api/tasks/{task['id']}/exports"
    cases = [
        (user.post(path, json={"format": "xlsx"}), 400, "invalid_format"),
        (user.post(path, json={}), 400, "invalid_format"),
        (user.post(path, json={"format": "csv", "extra": 1}), 400, "unknown_field"),
        (user.post(path, json=["csv"]), 400, "invalid_json"),
        (user.post(path, data="format=csv"), 400, "invalid_json"),
        (api.user().post(path, json={"format": "csv"}), 404, "task_not_found"),
        (user.post("/api/tasks/999999/exports", json={"format": "csv"}), 404, "task_not_found"),
    ]
    fresh = make_task(user, targets=("198.51.100.0/30",), ports="80")
    cases.append(
        (
            user.post(f"/api/tasks/{fresh['id']}/exports", json={"format": "zip"}),
            409,
            "no_succeeded_execution",
        )
    )
    for response, status, code in cases:
        body = response.get_json()
        assert (response.status_code, body["error"]["code"]) == (status, code), body
    assert user.post(path, json={"format": "xlsx"}).get_json()["error"]["details"] == {
        "field": "format",
        "allowed": ["csv", "jsonl", "zip"],
    }
    assert _export_count() == 0


def test_list_get_and_delete_are_owner_scoped(api, settings):
    user, task, _ = _scanned_task(api)
    admin, other = api.admin(), api.user()
    mine = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "csv"}).get_json()
    admins = admin.post(f"/api/tasks/{task['id']}/exports", json={"format": "jsonl"}).get_json()
    _build_all(settings)
    mine_id, admins_id = mine["export"]["id"], admins["export"]["id"]
    assert [e["id"] for e in user.get("/api/exports").get_json()["items"]] == [mine_id]
    assert [e["id"] for e in admin.get("/api/exports").get_json()["items"]] == [admins_id]
    assert other.get("/api/exports").get_json()["items"] == []
    assert other.get(f"/api/exports/{mine_id}").status_code == 404
    assert admin.get(f"/api/exports/{mine_id}").status_code == 200
    link = user.get(f"/api/exports/{mine_id}").get_json()["export"]["download_url"]

    assert other.delete(f"/api/exports/{mine_id}").status_code == 404
    deleted = user.delete(f"/api/exports/{mine_id}")
    assert deleted.status_code == 200
    body = deleted.get_json()
    assert body["export"]["status"] == "deleted"
    assert [o["status"] for o in body["objects"]] == ["deleted"]
    assert user.client.get(link).status_code == 404
    again = user.delete(f"/api/exports/{mine_id}").get_json()
    assert again["objects"] == [] and again["export"]["status"] == "deleted"
    got = user.get(f"/api/exports/{mine_id}").get_json()["export"]
    assert got["status"] == "deleted" and got["download_url"] is None


def test_expired_exports_are_deleted_by_the_expiry_job(api, settings):
    user, task, _ = _scanned_task(api)
    ids = [
        user.post(f"/api/tasks/{task['id']}/exports", json={"format": f}).get_json()["export"]["id"]
        for f in ("csv", "zip")
    ]
    _build_all(settings)
    store = open_object_store(settings)
    keys = {
        i: records.object_key(i, task["id"], f) for i, f in zip(ids, ("csv", "zip"), strict=True)
    }
    assert all(store.exists(k) for k in keys.values())
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE exports SET expires_at = now() - interval '1 second' WHERE id = :id"),
            {"id": ids[0]},
        )
    assert expire_exports(settings, store) == 1
    statuses = {i: user.get(f"/api/exports/{i}").get_json()["export"]["status"] for i in ids}
    assert statuses == {ids[0]: "expired", ids[1]: "ready"}
    assert not store.exists(keys[ids[0]]) and store.exists(keys[ids[1]])
    assert expire_exports(settings, store) == 0
    # The default retention is 72 hours from the build.
    ready = user.get(f"/api/exports/{ids[1]}").get_json()["export"]
    assert ready["expires_at"] > ready["finished_at"]
    with transaction() as conn:
        hours = conn.execute(
            sa.text(
                "SELECT extract(epoch FROM expires_at - finished_at) / 3600 FROM exports "
                "WHERE id = :id"
            ),
            {"id": ids[1]},
        ).scalar_one()
    assert round(float(hours)) == 72


def test_builds_are_capped_per_host_and_recovered_after_a_lost_lease(api, settings):
    settings = settings.replace(exports={"concurrency": 1, "lease_seconds": 30})
    user, task, observations = _scanned_task(api)
    first = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "csv"}).get_json()
    second = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "zip"}).get_json()
    config = settings.exports
    claim_args = {
        "concurrency": 1,
        "lease_seconds": config.lease_seconds,
        "max_attempts": config.max_attempts,
    }
    held, _ = records.claim_next_build(host="host-a", **claim_args)
    assert held.id == first["export"]["id"]
    # host-a already runs its one build; another host may take the next one.
    assert records.claim_next_build(host="host-a", **claim_args) == (None, [])
    other, _ = records.claim_next_build(host="host-b", **claim_args)
    assert other.id == second["export"]["id"]

    # host-a's runner dies: once its lease has passed, the build is claimed again and finished.
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE exports SET lease_expires_at = now() - interval '1 second' WHERE id = :id"
            ),
            {"id": held.id},
        )
    retaken, _ = records.claim_next_build(host="host-c", **claim_args)
    assert (retaken.id, retaken.attempts) == (held.id, 2)
    assert records.renew(held) is False
    assert records.finish_ready(held, size=1, rows=1, sha256="x", retention_hours=1) is False
    ExportBuildJob(settings, host="host-c").run(_context(settings), retaken)
    got = user.get(f"/api/exports/{held.id}").get_json()["export"]
    assert (got["status"], got["rows"], got["attempts"]) == ("ready", len(observations), 2)


def test_a_build_withdrawn_while_running_deletes_what_it_wrote(api, settings):
    user, task, _ = _scanned_task(api)
    export_id = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "zip"}).get_json()[
        "export"
    ]["id"]
    job = ExportBuildJob(settings, host="test-host")
    work = job.claim(_context(settings))
    assert user.delete(f"/api/exports/{export_id}").get_json()["objects"][0]["status"] == "missing"
    job.run(_context(settings), work)
    store = open_object_store(settings)
    assert not store.exists(work.object_key)
    assert user.get(f"/api/exports/{export_id}").get_json()["export"]["status"] == "deleted"


def test_s3_export_downloads_through_a_presigned_url(api, database_url, engine, tmp_path, request):
    import urllib.request

    from tests.support.s3 import s3_overrides
    from tests.support.settings import make_settings

    proxy = request.getfixturevalue("fault_proxy")
    settings = make_settings(database_url, tmp_path, object_store=s3_overrides(proxy.url))
    open_object_store(settings).ensure_bucket()
    from app import close_app, create_app
    from tests.support.api import Api

    s3_app = create_app(settings, engine=engine, modules="off")
    try:
        s3_api = Api(s3_app)
        user, task, observations = _scanned_task(s3_api)
        export_id = user.post(
            f"/api/tasks/{task['id']}/exports", json={"format": "zip"}
        ).get_json()["export"]["id"]
        _build_all(settings)
        url = user.get(f"/api/exports/{export_id}").get_json()["export"]["download_url"]
        assert url.startswith(proxy.url) and "X-Amz-Signature=" in url
        with urllib.request.urlopen(url) as response:  # noqa: S310 - loopback test server
            archive = zipfile.ZipFile(io.BytesIO(response.read()))
        manifest = json.loads(archive.read("manifest.json"))
        assert manifest["members"]["endpoints.csv"]["rows"] == len(observations)
    finally:
        close_app(s3_app)


def test_the_runner_runs_the_build_expiry_and_delete_retry_jobs(api, settings):
    from app.object_store.deleter import (
        DeleteResult,
        pending_delete_failures,
        record_delete_failures,
    )
    from jobs.registry import job_kinds

    kinds = {kind.name: kind for kind in job_kinds(settings)}
    assert {"export_build", "export-expiry", "object-delete-retry"} <= set(kinds)
    user, task, _ = _scanned_task(api)
    export_id = user.post(f"/api/tasks/{task['id']}/exports", json={"format": "csv"}).get_json()[
        "export"
    ]["id"]
    ctx = _context(settings)
    kinds["export_build"].run(ctx, kinds["export_build"].claim(ctx))
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE exports SET expires_at = now() - interval '1 second' WHERE id = :id"),
            {"id": export_id},
        )
    store = open_object_store(settings)
    store.put("reports/orphan.png", b"png", "image/png")
    record_delete_failures(
        [DeleteResult("reports/orphan.png", "failed", "ObjectStoreUnavailable: earlier outage")],
        origin="report_refused",
    )
    for name in ("export-expiry", "object-delete-retry"):
        kind = kinds[name]
        kind.run(ctx, kind.claim(ctx))
    assert user.get(f"/api/exports/{export_id}").get_json()["export"]["status"] == "expired"
    assert pending_delete_failures() == []
    assert not store.exists("reports/orphan.png")
