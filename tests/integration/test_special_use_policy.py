"""One special-use policy for direct targets and DNS answers (SCN-7), under the default
settings (the suite's own configuration allows loopback, which it scans with nmap):
loopback, link-local and cloud metadata addresses are refused as task targets and never
become a DNS task's follow-up targets; private ranges follow ``[scan]
special_use_targets``."""

from __future__ import annotations

import pytest

from app import close_app, create_app
from app.config import ScanSettings
from tests.support.api import Api
from tests.support.scanner_protocol import claim, dns_record
from tests.support.settings import make_settings


@pytest.fixture(params=["default", "no_private"])
def policy_api(request, database_url, tmp_path, engine):
    scan = (
        {"special_use_targets": list(ScanSettings().special_use_targets)}
        if request.param == "default"
        else {"special_use_targets": []}
    )
    application = create_app(make_settings(database_url, tmp_path, scan=scan), engine=engine)
    try:
        yield request.param, Api(application)
    finally:
        close_app(application)


def test_direct_targets(policy_api):
    policy, api = policy_api
    user = api.user()
    for target in (
        "127.0.0.1",
        "::1",
        "127.0.0.0/8",
        "169.254.169.254",
        "fe80::1",
        "::ffff:7f00:1",
    ):
        refused = user.post("/api/tasks", json={"name": "x", "targets": [target], "ports": "80"})
        assert refused.status_code == 400, target
        (item,) = refused.get_json()["error"]["details"]["items"]
        assert "special_use_targets" in item["reason"]
    private = user.post("/api/tasks", json={"name": "x", "targets": ["10.0.0.0/24"], "ports": "80"})
    assert private.status_code == (201 if policy == "default" else 400)
    public = user.post("/api/tasks", json={"name": "x", "targets": ["192.0.2.1"], "ports": "80"})
    assert public.status_code == 201


def test_dns_answers(policy_api):
    policy, api = policy_api
    user, scanner = api.user(), api.scanner()
    parent = user.post(
        "/api/tasks", json={"name": "d", "targets": ["example.com"], "ports": "80"}
    ).get_json()["task"]
    upload = claim(scanner)
    records = [
        dns_record("example.com", "127.0.0.1"),
        dns_record("example.com", "::1", type="AAAA"),
        dns_record("example.com", "169.254.169.254"),
        dns_record("example.com", "10.0.0.1"),
        dns_record("example.com", "192.0.2.10"),
    ]
    assert upload.final(0, [], dns_records=records).status_code == 200
    (child_id,) = user.get(f"/api/tasks/{parent['id']}").get_json()["task"]["child_task_ids"]
    child = user.get(f"/api/tasks/{child_id}").get_json()["task"]
    expected = ["10.0.0.1", "192.0.2.10"] if policy == "default" else ["192.0.2.10"]
    assert child["targets"] == expected


def test_an_ipv4_mapped_address_is_stored_as_the_ipv4_address(api):
    from tests.support.scanner_protocol import observation

    user, scanner = api.user(), api.scanner()
    task = user.post(
        "/api/tasks", json={"name": "m", "targets": ["192.0.2.0/28"], "ports": "80"}
    ).get_json()["task"]
    upload = claim(scanner)
    items = [observation("::ffff:192.0.2.1", 80), observation("::FFFF:c000:0202", 80)]
    assert upload.final(0, items).status_code == 200
    results = user.get(f"/api/tasks/{task['id']}/results").get_json()["items"]
    assert sorted(r["ip"] for r in results) == ["192.0.2.1", "192.0.2.2"]
