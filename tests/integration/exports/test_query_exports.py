"""Asset exports by search-language query: ``POST /api/exports {"query", "format"}``."""

from __future__ import annotations

import csv
import io
import json
import zipfile

from tests.integration.exports.test_exports import _build_all, _download, _export_count
from tests.integration.test_search_api import _publish, _scan
from tests.support.scanner_protocol import observation


def _assets(api):
    user = api.user()
    _, upload = _scan(
        user,
        api.scanner(),
        ["192.0.2.0/28"],
        [
            observation(
                f"192.0.2.{i}",
                port,
                service={"name": "ssh" if port == 22 else "https"},
                tls={"issuer": "CN=Test CA", "not_after": "2030-01-01T00:00:00Z"}
                if port == 443
                else None,
            )
            for i in range(1, 8)
            for port in (22, 443)
        ],
    )
    _publish(api.app, upload.id)
    return user


def test_a_query_export_holds_exactly_the_assets_the_query_finds(api, settings):
    settings = settings.replace(exports={"page_size": 3})  # several keyset pages
    user = _assets(api)
    created = user.post(
        "/api/exports",
        json={"query": 'port:443 cert.issuer:"test ca" -ip:192.0.2.1', "format": "zip"},
    )
    assert created.status_code == 202, created.get_json()
    export = created.get_json()["export"]
    assert export["task_id"] is None and export["query"].startswith("port:443")
    jsonl = user.post("/api/exports", json={"query": "ssh", "format": "jsonl"}).get_json()
    assert sorted(_build_all(settings)) == sorted([export["id"], jsonl["export"]["id"]])

    archive = zipfile.ZipFile(io.BytesIO(_download(user, export["id"])))
    rows = list(csv.DictReader(io.StringIO(archive.read("endpoints.csv").decode())))
    expected = [(f"192.0.2.{i}", 443) for i in range(2, 8)]
    assert sorted((r["ip"], int(r["port"])) for r in rows) == expected
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["query"] == export["query"] and manifest["query_at"]
    lines = [json.loads(x) for x in archive.read("endpoints.jsonl").decode().splitlines()]
    assert {x["details"]["tls"]["issuer"] for x in lines} == {"CN=Test CA"}  # facts exported
    described = user.get(f"/api/exports/{export['id']}").get_json()["export"]
    assert described["rows"] == 6

    # Bare words are free text, as in q: the banner/product/hostname substring.
    ssh = [json.loads(x) for x in _download(user, jsonl["export"]["id"]).decode().splitlines()]
    assert ssh == []  # no banner, product or hostname says "ssh"; the service does
    # The console lists it with its query, not a task.
    page = user.get("/console/exports")
    assert page.status_code == 200 and b"port:443" in page.data


def test_a_bad_query_export_is_a_400_and_queues_nothing(api):
    user = api.user()
    before = _export_count()
    for body, code in (
        ({"query": "port:", "format": "csv"}, "invalid_query"),
        ({"query": 5, "format": "csv"}, "invalid_query"),
        ({"query": "port:22", "format": "xls"}, "invalid_format"),
        ({"query": "port:22", "format": "csv", "extra": 1}, "unknown_field"),
    ):
        response = user.post("/api/exports", json=body)
        assert response.status_code == 400, body
        assert response.get_json()["error"]["code"] == code, body
    error = user.post("/api/exports", json={"query": "port:abc", "format": "csv"}).get_json()
    assert error["error"]["details"]["column"] == 6
    assert _export_count() == before
