"""A field a scan did not probe is not a change (docs/changes.md), field by field.

For every field of ``FIELD_RULES`` over both search stores: a scan that reports a
``when_probed`` field and a later one that does not leave no ``changed`` entry, and
the current asset keeps the value with the time it was observed; a later scan that
reports another value is a ``changed`` with old and new. An ``always`` field (the
port state) changes whenever the value differs. The lighter scan end to end goes
through the scanner protocol over HTTP: service detection first, then none.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from app.analysis.changes import ANALYSIS_FIELDS
from app.db import transaction
from app.search.documents import DETAIL_FIELDS, FIELD_RULES
from tests.integration.analysis.test_analysis_api import _run_workers, _scan
from tests.support.analysis import Scans, changes_of
from tests.support.scanner_protocol import observation

# Two observable values of each field; a field added to FIELD_RULES without values here
# fails test_every_field_has_a_case, so each field keeps its own test.
VALUES = {
    "state": ("open", "closed"),
    "service": ("http", "https"),
    "product": ("nginx", "Apache httpd"),
    "version": ("1.24", "2.4.58"),
    "banner": ("SSH-2.0-OpenSSH_9.6", "SSH-2.0-OpenSSH_9.7"),
    "hostname": ("a.example.test", "b.example.test"),
    "cert_sha256": ("aa" * 32, "bb" * 32),
}
# The analysis compares the banner by its hash.
COLUMN = {name: name for name in VALUES} | {"banner": "banner_hash"}


def test_every_field_has_a_case() -> None:
    assert set(VALUES) == set(FIELD_RULES)
    assert set(ANALYSIS_FIELDS) == {COLUMN[name] for name in FIELD_RULES}


def _change_values(execution_id: int, field: str) -> list[tuple]:
    column = COLUMN[field]
    with transaction() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                sa.text(
                    f"SELECT kind, old_{column}, new_{column} FROM analysis_changes "
                    "WHERE execution_id = :e ORDER BY id"
                ),
                {"e": execution_id},
            )
        ]


def _reported(field: str, value: str | None) -> dict:
    """An observation's fields reporting ``value`` for ``field`` (None: not probed)."""
    if field == "cert_sha256":  # a fact of the details (tests/.../test_certificate_changes.py)
        return {"details": {"tls": {"sha256": value}}} if value else {}
    return {field: value}


def _recorded(owner: int, ip: str, field: str) -> str | None:
    """The analysis's current value of ``field`` for the owner's endpoint ip:80/tcp."""
    column = COLUMN[field]
    with transaction() as conn:
        return conn.execute(
            sa.text(
                f"SELECT {column} FROM analysis_assets WHERE owner_id = :o AND ip = :ip "
                "AND port = 80 AND transport = 'tcp'"
            ),
            {"o": owner, "ip": ip},
        ).scalar_one()


def _hashed(field: str, value: str | None) -> str | None:
    if field != "banner" or value is None:
        return value
    import hashlib

    return hashlib.md5(value.encode()).hexdigest()  # noqa: S324 - the analysis's banner key


@pytest.mark.parametrize("field", [f for f, r in FIELD_RULES.items() if r == "when_probed"])
def test_an_unprobed_field_is_kept_and_no_change(scans: Scans, field: str) -> None:
    owner = scans.owner()
    ip = "10.2.0.1"
    first_value, second_value = VALUES[field]
    in_document = field not in DETAIL_FIELDS  # a fact of the details: the analysis keeps it
    scans.scan(owner, [ip], [(ip, 80, "tcp", _reported(field, first_value))])
    scans.settle()
    probed_at = scans.assets(owner)[(ip, 80, "tcp")].last_seen

    lighter = scans.scan(owner, [ip], [(ip, 80, "tcp", _reported(field, None))])
    scans.settle()
    assert changes_of(lighter) == []
    asset = scans.assets(owner)[(ip, 80, "tcp")]
    assert _recorded(owner, ip, field) == _hashed(field, first_value)
    assert asset.last_seen > probed_at
    if in_document:
        assert getattr(asset, field) == first_value
        assert asset.public()["observed"][field] == probed_at.isoformat()
        # The global view keeps it too.
        global_asset = scans.assets(None, scope="global")[(ip, 80, "tcp")]
        assert getattr(global_asset, field) == first_value

    probed = scans.scan(owner, [ip], [(ip, 80, "tcp", _reported(field, second_value))])
    scans.settle()
    assert _change_values(probed, field) == [
        ("changed", _hashed(field, first_value), _hashed(field, second_value))
    ]
    assert _recorded(owner, ip, field) == _hashed(field, second_value)
    if in_document:
        asset = scans.assets(owner)[(ip, 80, "tcp")]
        assert getattr(asset, field) == second_value
        assert asset.public()["observed"][field] == asset.last_seen.isoformat()


@pytest.mark.parametrize("field", [f for f, r in FIELD_RULES.items() if r == "always"])
def test_an_always_reported_field_changes_when_it_differs(scans: Scans, field: str) -> None:
    owner = scans.owner()
    ip = "10.2.0.2"
    first_value, second_value = VALUES[field]
    scans.scan(owner, [ip], [(ip, 80, "tcp", {field: first_value})])
    scans.settle()
    same = scans.scan(owner, [ip], [(ip, 80, "tcp", {field: first_value})])
    scans.settle()
    assert changes_of(same) == []
    other = scans.scan(owner, [ip], [(ip, 80, "tcp", {field: second_value})])
    scans.settle()
    assert _change_values(other, field) == [("changed", first_value, second_value)]
    assert getattr(scans.assets(owner)[(ip, 80, "tcp")], field) == second_value


def test_a_lighter_scan_after_a_late_older_one_keeps_the_newest_values(scans: Scans) -> None:
    """The kept value is the newest observed one, whatever order the scans publish in."""
    owner = scans.owner()
    ip = "10.2.0.3"
    base = scans.clock
    scans.scan(
        owner, [ip], [(ip, 22, "tcp", {"product": "OpenSSH"})], finished_at=base + timedelta(2)
    )
    scans.scan(
        owner, [ip], [(ip, 22, "tcp", {"product": "Dropbear"})], finished_at=base + timedelta(1)
    )
    scans.scan(owner, [ip], [(ip, 22, "tcp", {"product": None})], finished_at=base + timedelta(3))
    scans.settle()
    assert scans.assets(owner)[(ip, 22, "tcp")].product == "OpenSSH"


def test_service_detection_then_a_lighter_scan_over_http(api, settings) -> None:
    """The issue's case: -sV, then the same ports without it: no change, product kept."""
    alice, scanner = api.user(), api.scanner()
    hosts = ["192.0.2.1", "192.0.2.2"]
    detected = [
        observation(ip, 22, service={"name": "ssh", "product": "OpenSSH", "version": "9.6p1"})
        for ip in hosts
    ]
    _scan(alice, scanner, detected)
    _run_workers(settings)

    task, _ = _scan(alice, scanner, [observation(ip, 22) for ip in hosts])
    _run_workers(settings)

    detail = alice.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["changes"]["changed"] == 0 and detail["changes"]["gone"] == 0
    assert alice.get(f"/api/tasks/{task['id']}/changes").get_json()["items"] == []
    assets = alice.get("/api/assets").get_json()["items"]
    assert {(a["ip"], a["service"], a["product"], a["version"]) for a in assets} == {
        (ip, "ssh", "OpenSSH", "9.6p1") for ip in hosts
    }
    for asset in assets:
        assert set(asset["observed"]) >= {"service", "product", "version"}
        assert asset["observed"]["product"] < asset["last_seen"]
