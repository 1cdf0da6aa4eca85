"""The scanner fleet (issue 33): status, what the agent reports, revoking a token.

Against the app with a real PostgreSQL: a scanner is ``never_seen`` until its first
call, ``online`` after a claim poll (the agent's report is kept), ``busy`` while it
holds a live lease (``current_execution_id``), ``offline`` once its last sign of life
is older than ``[scan] scanner_offline_seconds``; the observation rate comes from its
last finished execution; ``disable`` makes its next call a 401 and is audited. The
real agent process's report is covered by tests/e2e/test_scanner_fleet_agent.py.
"""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from tests.support.scanner_protocol import claim, make_task, observation

ABOUT = {"version": "0.1.0", "hostname": "scan-host-1", "engines": {"nmap": "7.93"}}


def _fleet(session) -> dict[int, dict]:
    response = session.get("/api/scanners")
    assert response.status_code == 200, response.get_json()
    return {item["id"]: item for item in response.get_json()["items"]}


def _age_last_seen(scanner_id: int, seconds: int) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scanners SET last_seen_at = now() - make_interval(secs => :s) "
                "WHERE id = :id"
            ),
            {"s": seconds, "id": scanner_id},
        )


def test_status_follows_claims_leases_and_silence(api, settings):
    admin = api.admin()
    user = api.user()
    scanner = api.scanner()

    item = _fleet(admin)[scanner.id]
    assert item["status"] == "never_seen"
    assert item["last_seen_at"] is None and item["current_execution_id"] is None
    assert item["version"] is None and item["engines"] == {}

    # An idle agent's claim poll (204) is a sign of life and carries its report.
    assert scanner.claim(kinds=["ports"], agent=ABOUT).status_code == 204
    item = _fleet(admin)[scanner.id]
    assert item["status"] == "online"
    assert item["last_seen_at"] is not None
    assert (item["version"], item["hostname"], item["engines"]) == (
        "0.1.0",
        "scan-host-1",
        {"nmap": "7.93"},
    )

    # Holding a live execution lease: busy, with the execution named.
    make_task(user, targets=("192.0.2.1",), ports="443")
    held = claim(scanner, kinds=["ports"])
    item = _fleet(admin)[scanner.id]
    assert item["status"] == "busy" and item["current_execution_id"] == held.id

    # A renewal carries a changed report (a new engine after an upgrade).
    upgraded = {**ABOUT, "engines": {"nmap": "7.94", "masscan": "1.3.2"}}
    renewed = scanner.post(
        f"/api/scanner/executions/{held.id}/lease",
        json={"claim_token": held.token, "agent": upgraded},
    )
    assert renewed.status_code == 200, renewed.get_json()
    assert _fleet(admin)[scanner.id]["engines"] == {"masscan": "1.3.2", "nmap": "7.94"}

    # The final upload finishes the execution: no longer busy, and the last run's rate.
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET started_at = now() - interval '4 seconds' "
                "WHERE id = :id"
            ),
            {"id": held.id},
        )
    done = held.final(0, [observation("192.0.2.1", 443), observation("192.0.2.1", 443)])
    assert done.status_code == 200, done.get_json()
    item = _fleet(admin)[scanner.id]
    assert item["status"] == "online" and item["current_execution_id"] is None
    assert item["last_execution_id"] == held.id
    with transaction() as conn:
        row = conn.execute(
            sa.text(
                "SELECT observation_count, extract(epoch FROM finished_at - started_at) AS s "
                "FROM scan_executions WHERE id = :id"
            ),
            {"id": held.id},
        ).one()
    assert row.observation_count == 2
    assert item["observations_per_second"] == round(2 / float(row.s), 3)

    # Silence past the offline window: offline; the next poll brings it back.
    offline_seconds = settings.scan.scanner_offline_seconds
    _age_last_seen(scanner.id, offline_seconds + 5)
    assert _fleet(admin)[scanner.id]["status"] == "offline"
    assert scanner.claim(kinds=["ports"]).status_code == 204
    assert _fleet(admin)[scanner.id]["status"] == "online"


def test_unchanged_reports_do_not_write_the_row(api):
    admin = api.admin()
    scanner = api.scanner()
    assert scanner.claim(agent=ABOUT).status_code == 204

    def row_version():
        with transaction() as conn:
            return conn.execute(
                sa.text("SELECT xmin::text FROM scanners WHERE id = :id"), {"id": scanner.id}
            ).scalar_one()

    before = row_version()
    for _ in range(5):  # polls inside last_seen_at's resolution with the same report
        assert scanner.claim(agent=ABOUT).status_code == 204
    assert row_version() == before
    assert _fleet(admin)[scanner.id]["hostname"] == "scan-host-1"


def test_bad_agent_reports_are_400_naming_the_field(api):
    scanner = api.scanner()
    cases = [
        ("not an object", "agent"),
        ({"version": 7}, "agent.version"),
        ({"hostname": "x" * 256}, "agent.hostname"),
        ({"engines": ["nmap"]}, "agent.engines"),
        ({"engines": {"Nmap!": "1"}}, "agent.engines"),
        ({"engines": {"nmap": 7.93}}, "agent.engines.nmap"),
        ({"colour": "blue"}, "agent.colour"),
    ]
    for agent, field in cases:
        response = scanner.claim(agent=agent)
        assert response.status_code == 400, (agent, response.get_json())
        error = response.get_json()["error"]
        assert error["code"] == "invalid_agent" and error["details"]["field"] == field, error
    with transaction() as conn:
        stored = conn.execute(
            sa.text("SELECT agent_version, hostname, engines FROM scanners WHERE id = :id"),
            {"id": scanner.id},
        ).one()
    assert tuple(stored) == (None, None, {})


def test_owners_see_their_own_scanners_and_only_admins_disable(api):
    admin = api.admin()
    user = api.user()
    mine = admin.post("/api/scanners", json={"name": "made-by-admin"}).get_json()
    other = api.scanner()  # created outside any session: no owner
    assert {mine["id"], other.id} <= set(_fleet(admin))
    # Only admins create scanners, so a user owns none and sees none.
    assert _fleet(user) == {}
    assert user.post(f"/api/scanners/{other.id}/disable").status_code == 403


def test_disable_revokes_the_token_and_is_audited(api):
    admin = api.admin()
    scanner = api.scanner()
    assert scanner.claim().status_code == 204
    response = admin.post(f"/api/scanners/{scanner.id}/disable")
    assert response.status_code == 200, response.get_json()
    assert response.get_json() == {"id": scanner.id, "name": scanner.name, "disabled": True}
    refused = scanner.claim()
    assert refused.status_code == 401
    assert refused.get_json()["error"]["code"] == "invalid_token"
    assert _fleet(admin)[scanner.id]["disabled"] is True
    with transaction() as conn:
        audit = conn.execute(
            sa.text(
                "SELECT actor_user_id, details->>'via' AS via FROM audit_log "
                "WHERE action = 'scanner.disable' AND target_id = :id"
            ),
            {"id": str(scanner.id)},
        ).all()
    assert [(a.actor_user_id, a.via) for a in audit] == [(admin.id, "api")]
    assert admin.post("/api/scanners/999999999/disable").status_code == 404


def test_dashboard_says_when_work_waits_and_no_scanner_is_online(api):
    user = api.user()
    page = user.get("/console/")
    assert page.status_code == 200
    assert b'id="no-scanner"' not in page.data  # nothing waits
    # An import-only task has nothing for a scanner to do (it is idle): no warning.
    imports = user.post(
        "/api/tasks", json={"name": "files", "targets": ["192.0.2.8"], "ports": "22", "scan": False}
    )
    assert imports.get_json()["task"]["status"] == "idle"
    assert b'id="no-scanner"' not in user.get("/console/").data

    make_task(user, targets=("192.0.2.9",), ports="22")
    with transaction() as conn:  # every scanner of this database silent
        conn.execute(sa.text("UPDATE scanners SET last_seen_at = now() - interval '1 day'"))
    page = user.get("/console/")
    assert b'id="no-scanner"' in page.data
    assert b"netmap agent --server http://localhost" in page.data

    scanner = api.scanner()
    assert scanner.claim(kinds=["dns"]).status_code == 204  # online, nothing of its kind
    assert b'id="no-scanner"' not in user.get("/console/").data


def test_scanners_page_shows_status_badges(api):
    admin = api.admin()
    seen = api.scanner()
    api.scanner()
    assert seen.claim(agent=ABOUT).status_code == 204
    page = admin.get("/console/scanners")
    assert page.status_code == 200
    html = page.data.decode()
    assert f'id="scanner-{seen.id}"' in html
    row = html.split(f'id="scanner-{seen.id}"')[1].split("</tr>")[0]
    assert 'data-status="online"' in row and "scan-host-1" in row and "nmap 7.93" in row
    assert 'data-status="never_seen"' in html


def test_unknown_fields_in_claim_lease_and_fail_are_refused_and_change_nothing(api):
    """As in uploads and the agent report: a misspelt key is a 400 naming it, not a
    default. A claim with ``kind`` (for ``kinds``) would otherwise take any kind of work."""
    user, scanner = api.user(), api.scanner()
    make_task(user)
    answer = scanner.claim(kind=["dns"])
    assert answer.status_code == 400, answer.get_json()
    assert answer.get_json()["error"]["code"] == "unknown_field"
    assert answer.get_json()["error"]["details"] == {"field": "kind"}
    answer = scanner.claim(kinds=None)
    assert answer.status_code == 400 and answer.get_json()["error"]["code"] == "invalid_kinds"
    claimed = claim(scanner)  # the refused claims took nothing: the execution is still there
    path = f"/api/scanner/executions/{claimed.id}"
    for route, body, field in [
        ("lease", {"claim_token": claimed.token, "lease_seconds": 600}, "lease_seconds"),
        ("fail", {"claim_token": claimed.token, "reasons": "nmap died"}, "reasons"),
    ]:
        answer = scanner.post(f"{path}/{route}", json=body)
        assert answer.status_code == 400, answer.get_json()
        assert answer.get_json()["error"]["code"] == "unknown_field"
        assert answer.get_json()["error"]["details"] == {"field": field}
    with transaction() as conn:
        status = conn.execute(
            sa.text("SELECT status FROM scan_executions WHERE id = :id"), {"id": claimed.id}
        ).scalar_one()
    assert status == "running"
    assert scanner.post(f"{path}/fail", json={"claim_token": claimed.token}).status_code == 200
