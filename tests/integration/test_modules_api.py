"""The admin API and the per-process selection service against real PostgreSQL and real workers."""

from __future__ import annotations

import logging
import shutil
import threading

import pytest
import sqlalchemy as sa

from app import close_app, create_app, db
from app.db import transaction
from app.modules.errors import ErrorKind, ModuleError
from app.modules.selection import NAMESPACE
from app.renderer.contract import self_test_input
from tests.support.api import Api
from tests.support.settings import (
    DIES_AFTER_SELF_TEST_RELEASE,
    FAULTY_RELEASE,
    RENDERER_RELEASES,
    make_settings,
)
from tests.support.waiting import process_gone, wait_until

URL = "/api/modules/report-render"


@pytest.fixture
def make_app(database_url, tmp_path, engine, renderer_releases):
    apps = []

    own_engines = []

    def factory(modules: str = "manual", releases=renderer_releases, **sections):
        renderer = {"releases_directory": str(releases), **sections.pop("report_renderer", {})}
        settings = make_settings(database_url, tmp_path, report_renderer=renderer, **sections)
        app_engine = engine
        if "database" in sections:  # database settings (timeouts) live in the engine
            app_engine = db.create_engine(database_url, settings.database)
            own_engines.append(app_engine)
        application = create_app(settings, engine=app_engine, modules=modules)
        apps.append(application)
        return application

    yield factory
    for application in apps:
        close_app(application)
    for own in own_engines:
        own.dispose()
    db.set_engine(engine)


def service_of(application):
    return application.extensions["netmap.report_render"]


def revisions(conn) -> list[tuple[int, str, str]]:
    return [
        (r.revision, r.document["release_id"], r.change_reason)
        for r in conn.execute(
            sa.text(
                "SELECT revision, document, change_reason FROM runtime_configuration_revisions "
                "WHERE namespace = :ns ORDER BY revision"
            ),
            {"ns": NAMESPACE},
        )
    ]


def publish(admin, expected: int, release_id: str, reason: str = "test publish"):
    return admin.post(
        URL, json={"expectedRevision": expected, "releaseId": release_id, "changeReason": reason}
    )


def test_default_selection_status_publish_audit_and_rollback(make_app):
    application = make_app()
    admin = Api(application).admin()
    status = admin.get(URL).get_json()
    assert status["desired"] == {"release_id": "builtin", "revision": 1}
    assert status["applied"] == {"release_id": "builtin", "revision": 1, "generation": 1}
    assert status["available"] and status["synced"] and status["converged"]
    assert status["lastRefreshError"] is None

    response = publish(admin, 1, RENDERER_RELEASES[0], "new mail layout")
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert body["revision"] == 2 and body["releaseId"] == RENDERER_RELEASES[0]
    assert body["applied"] == {"release_id": RENDERER_RELEASES[0], "revision": 2, "generation": 2}
    assert body["converged"]

    with service_of(application).acquire() as lease:
        assert lease.identity.release_id == RENDERER_RELEASES[0]
        assert lease.invoke("render", self_test_input())["subject"]

    # Rollback = a new revision selecting builtin; the revision never goes back.
    response = publish(admin, 2, "builtin", "roll back")
    assert response.status_code == 200
    assert response.get_json()["applied"]["release_id"] == "builtin"
    assert response.get_json()["revision"] == 3
    with transaction() as conn:
        assert revisions(conn) == [
            (1, "builtin", "default selection"),
            (2, RENDERER_RELEASES[0], "new mail layout"),
            (3, "builtin", "roll back"),
        ]
        audit = conn.execute(
            sa.text(
                "SELECT actor_user_id, details FROM audit_log WHERE action = 'module.publish' "
                "ORDER BY id"
            )
        ).all()
    assert [a.details["change_reason"] for a in audit] == ["new mail layout", "roll back"]
    assert all(a.actor_user_id == admin.id for a in audit)
    wait_until(lambda: not service_of(application).registry.draining())


def test_default_is_not_overwritten_at_start_up(make_app):
    first = make_app()
    admin = Api(first).admin()
    assert publish(admin, 1, RENDERER_RELEASES[1]).status_code == 200
    second = make_app()
    status = service_of(second).status()
    assert status["desired"] == {"release_id": RENDERER_RELEASES[1], "revision": 2}
    assert status["applied"]["release_id"] == RENDERER_RELEASES[1] and status["converged"]


def test_conflict_and_bad_candidates_write_nothing(make_app):
    application = make_app()
    admin = Api(application).admin()
    response = publish(admin, 7, RENDERER_RELEASES[0])
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "revision_conflict"
    assert response.get_json()["error"]["details"]["currentRevision"] == 1
    for release_id in ("renderer-9.9.9", "../etc", "bad id", FAULTY_RELEASE + "x"):
        response = publish(admin, 1, release_id)
        assert response.status_code == 400, (release_id, response.get_json())
        assert response.get_json()["error"]["code"] == "invalid_release"
    for body in (
        {"releaseId": "builtin", "changeReason": "x"},
        {"expectedRevision": 0, "releaseId": "builtin", "changeReason": "x"},
        {"expectedRevision": True, "releaseId": "builtin", "changeReason": "x"},
        {"expectedRevision": 1, "releaseId": "builtin", "changeReason": "  "},
        {"expectedRevision": 1, "releaseId": 5, "changeReason": "x"},
        {"expectedRevision": 1, "releaseId": "builtin", "changeReason": "a\u0001b"},
    ):
        response = admin.post(URL, json=body)
        assert response.status_code == 400
        assert response.get_json()["error"]["code"] == "invalid_request"
    # A misspelt field publishes nothing.
    typo = admin.post(
        URL, json={"expectedRevision": 1, "releaseId": "builtin", "changeReason": "x", "zz": 1}
    )
    assert typo.status_code == 400 and typo.get_json()["error"]["code"] == "unknown_field"
    with transaction() as conn:
        assert revisions(conn) == [(1, "builtin", "default selection")]
        assert not conn.execute(
            sa.text("SELECT count(*) FROM audit_log WHERE action = 'module.publish'")
        ).scalar()
    assert service_of(application).status()["applied"]["release_id"] == "builtin"


def test_only_admins_with_csrf_may_publish(make_app):
    application = make_app()
    api = Api(application)
    assert application.test_client().get(URL).status_code == 401
    user = api.user()
    assert user.get(URL).status_code == 403
    assert publish(user, 1, "builtin").status_code == 403
    admin = api.admin()
    response = admin.client.post(
        URL, json={"expectedRevision": 1, "releaseId": "builtin", "changeReason": "x"}
    )
    assert response.status_code == 403
    assert response.get_json()["error"]["code"] == "csrf_failed"


def test_admin_rate_limit_applies(make_app):
    application = make_app(security={"admin_rate_limit": "3 per hour"})
    admin = Api(application).admin()
    codes = [admin.get(URL).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]


def test_database_failure_during_publish_is_503_and_writes_nothing(make_app, database_url):
    application = make_app(database={"lock_timeout_ms": 300})
    admin = Api(application).admin()
    blocker = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg2://"))
    try:
        with blocker.connect() as conn, conn.begin():
            conn.execute(
                sa.text("SELECT 1 FROM runtime_configuration WHERE namespace = :ns FOR UPDATE"),
                {"ns": NAMESPACE},
            )
            response = publish(admin, 1, RENDERER_RELEASES[0])
    finally:
        blocker.dispose()
    assert response.status_code == 503, response.get_json()
    assert response.get_json()["error"]["code"] == "database_unavailable"
    assert "pendingActivation" not in response.get_json()
    status = service_of(application).status()
    assert status["desired"]["revision"] == 1 and status["applied"]["release_id"] == "builtin"
    with transaction() as conn:
        assert publish_audit(conn) == []  # a failed publish is not audited as published


def publish_audit(conn) -> list:
    return conn.execute(
        sa.text(
            "SELECT actor_user_id, details, xmin::text AS xid FROM audit_log "
            "WHERE action = 'module.publish' ORDER BY id"
        )
    ).all()


def test_publish_is_audited_after_the_selection_in_its_own_transaction(make_app):
    application = make_app()
    admin = Api(application).admin()
    assert publish(admin, 1, RENDERER_RELEASES[0], "audited").status_code == 200
    with transaction() as conn:
        (audit,) = publish_audit(conn)
        saved_in = conn.execute(
            sa.text(
                "SELECT xmin::text FROM runtime_configuration_revisions "
                "WHERE namespace = :ns AND revision = 2"
            ),
            {"ns": NAMESPACE},
        ).scalar_one()
    assert audit.actor_user_id == admin.id
    assert audit.details == {
        "release_id": RENDERER_RELEASES[0],
        "revision": 2,
        "expected_revision": 1,
        "change_reason": "audited",
        "pending_activation": False,
    }
    # Written by a later transaction than the selection's (MOD-8: audited after the
    # publish succeeded, not inside the selection transaction).
    assert int(audit.xid) > int(saved_in)


def test_a_failing_audit_write_does_not_undo_the_publish(make_app, monkeypatch, caplog):
    import app.modules.service as service_module

    def broken_audit(*_args, **_kwargs):
        raise RuntimeError("audit_log unavailable")

    application = make_app()
    admin = Api(application).admin()
    monkeypatch.setattr(service_module, "record_audit", broken_audit)
    caplog.set_level(logging.INFO, logger="netmap.events")
    response = publish(admin, 1, RENDERER_RELEASES[0], "kept")
    assert response.status_code == 200, response.get_json()
    assert response.get_json()["revision"] == 2
    with transaction() as conn:
        assert revisions(conn)[-1] == (2, RENDERER_RELEASES[0], "kept")
        assert publish_audit(conn) == []
    failed = [
        r.netmap_fields
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "ReportRendererPublishAuditFailed"
    ]
    assert [{k: f[k] for k in ("release_id", "revision", "error")} for f in failed] == [
        {"release_id": RENDERER_RELEASES[0], "revision": 2, "error": "RuntimeError"}
    ]


def test_persisted_but_not_activated_is_503_pending_activation(make_app):
    application = make_app()
    admin = Api(application).admin()
    response = publish(admin, 1, DIES_AFTER_SELF_TEST_RELEASE)
    assert response.status_code == 503
    body = response.get_json()
    assert body["persistedRevision"] == 2 and body["pendingActivation"] is True
    assert body["error"]["code"] == "pending_activation"
    assert body["error"]["details"] == {"persistedRevision": 2, "pendingActivation": True}
    status = admin.get(URL).get_json()
    assert status["desired"] == {"release_id": DIES_AFTER_SELF_TEST_RELEASE, "revision": 2}
    assert status["applied"]["release_id"] == "builtin" and status["applied"]["revision"] == 1
    assert not status["converged"] and not status["synced"]
    assert status["lastRefreshError"]
    # The operator's way out: publish the next revision (here a rollback to builtin).
    assert publish(admin, 2, "builtin", "back to builtin").status_code == 200
    assert admin.get(URL).get_json()["converged"]
    with transaction() as conn:
        # Saved means published (every instance applies it): audited, marked pending here.
        audit = [
            (a.details["revision"], a.details["pending_activation"]) for a in publish_audit(conn)
        ]
    assert audit == [(2, True), (3, False)]


def test_missing_artifact_at_start_up_leaves_rendering_unavailable_without_fallback(
    make_app, renderer_releases, tmp_path
):
    releases = tmp_path / "installed"
    releases.mkdir()
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO runtime_configuration (namespace, schema_version, revision, document) "
                "VALUES (:ns, 1, 5, CAST(:doc AS jsonb))"
            ),
            {"ns": NAMESPACE, "doc": f'{{"release_id": "{RENDERER_RELEASES[0]}"}}'},
        )
    application = make_app(releases=releases)  # starts although the release is missing
    service = service_of(application)
    status = service.status()
    assert status["desired"] == {"release_id": RENDERER_RELEASES[0], "revision": 5}
    assert status["applied"] == {"release_id": None, "revision": None, "generation": None}
    assert not status["available"] and not status["converged"]
    assert "not installed" in status["lastRefreshError"]
    with pytest.raises(ModuleError) as caught:
        service.acquire()
    assert caught.value.kind is ErrorKind.NOT_READY  # not a silent builtin
    service.refresh_once()
    assert not service.status()["available"]
    # The operator installs the artifact; the next refresh applies it.
    shutil.copytree(renderer_releases / RENDERER_RELEASES[0], releases / RENDERER_RELEASES[0])
    service.refresh_once()
    status = service.status()
    assert status["applied"]["release_id"] == RENDERER_RELEASES[0] and status["converged"]


def test_future_schema_version_is_refused_and_the_applied_generation_kept(make_app):
    application = make_app()
    service = service_of(application)
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE runtime_configuration SET schema_version = 2, revision = 9, "
                'document = \'{"release_id": "x", "v2": true}\' WHERE namespace = :ns'
            ),
            {"ns": NAMESPACE},
        )
    service.refresh_once()
    status = service.status()
    assert "schema_version 2" in status["lastRefreshError"]
    assert status["applied"]["release_id"] == "builtin" and status["available"]


def test_database_failure_at_start_up_is_a_start_up_error(empty_database_url, tmp_path):
    settings = make_settings(empty_database_url, tmp_path)
    from app import db

    engine = db.create_engine(empty_database_url, settings.database)
    try:
        with pytest.raises(sa.exc.ProgrammingError):
            create_app(settings, engine=engine, modules="manual")
    finally:
        engine.dispose()
        db.set_engine(None)


def test_crashed_worker_is_restored_at_the_same_revision_by_the_refresh_loop(make_app):
    application = make_app(modules="background", report_renderer={"refresh_seconds": 0.2})
    service = service_of(application)
    admin = Api(application).admin()
    assert publish(admin, 1, FAULTY_RELEASE).status_code == 200
    before = service.registry.current("report-render")
    old_pid = before.module.pid
    crash = self_test_input()
    crash["template"]["version"] = "fault:exit"
    with service.acquire() as lease, pytest.raises(ModuleError) as caught:
        lease.invoke("render", crash)
    assert caught.value.kind is ErrorKind.UNAVAILABLE and caught.value.retryable
    assert process_gone(old_pid)

    def restored():
        current = service.registry.current("report-render")
        return current is not before and current.available() and current

    current = wait_until(restored)
    assert current.identity.revision == 2 and current.identity.release_id == FAULTY_RELEASE
    assert current.module.pid != old_pid
    status = admin.get(URL).get_json()
    assert status["converged"] and status["applied"]["revision"] == 2
    with service.acquire() as lease:
        assert lease.invoke("render", self_test_input())["subject"]


def test_another_process_publish_is_applied_by_refresh(make_app):
    first = make_app()
    second = make_app()
    assert publish(Api(first).admin(), 1, RENDERER_RELEASES[0]).status_code == 200
    assert service_of(second).status()["applied"]["release_id"] == "builtin"
    assert not service_of(second).status()["converged"]
    service_of(second).refresh_once()
    status = service_of(second).status()
    assert status["applied"] == {"release_id": RENDERER_RELEASES[0], "revision": 2, "generation": 2}
    assert status["converged"]


def test_concurrent_publishes_one_wins_the_other_conflicts(make_app):
    application = make_app()
    api = Api(application)
    admins = [api.admin(), api.admin()]
    codes: list[int] = []
    barrier = threading.Barrier(2)

    def go(admin, release_id):
        barrier.wait()
        codes.append(publish(admin, 1, release_id).status_code)

    threads = [
        threading.Thread(target=go, args=(admin, release))
        for admin, release in zip(admins, RENDERER_RELEASES, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(codes) == [200, 409]
    status = service_of(application).status()
    assert status["desired"]["revision"] == 2 and status["converged"]


def test_a_stuck_generation_is_reported_and_closed_by_an_admin_in_every_process(make_app):
    """MOD-2: a replaced generation still holding work after the drain timeout is
    reported (status, event) and closed only by an explicit admin request, which
    every process applies (here a second app, as another worker would)."""
    application = make_app(report_renderer={"drain_timeout_seconds": 0.3})
    other = make_app(report_renderer={"drain_timeout_seconds": 0.3})
    admin = Api(application).admin()
    here, there = service_of(application), service_of(other)
    held = [here.acquire(), there.acquire()]  # handles never released
    assert publish(admin, 1, RENDERER_RELEASES[0]).status_code == 200
    there.refresh_once()
    for service in (here, there):
        wait_until(lambda s=service: any(d["stuck"] for d in s.registry.draining_state()))
    (draining,) = admin.get(URL).get_json()["draining"]
    assert draining["stuck"] and draining["revision"] == 1 and draining["leases"] == 1

    bad = admin.post(f"{URL}/close-stuck", json={"throughRevision": "1"})
    assert bad.status_code == 400
    # No generation has a revision beyond the current one; a misspelt field closes nothing.
    for body in ({"throughRevision": 10**20}, {"throughRevision": 1, "force": True}):
        refused = admin.post(f"{URL}/close-stuck", json=body)
        assert refused.status_code == 400, (body, refused.get_json())
    assert here.registry.draining()
    response = admin.post(f"{URL}/close-stuck", json={"throughRevision": 1})
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["closedHere"] == [1]
    (audited,) = admin.get("/api/audit?action=module.close_stuck").get_json()["items"]
    assert audited["details"]["through_revision"] == 1
    wait_until(lambda: not here.registry.draining())
    assert there.registry.draining()  # the other process applies it on its refresh
    there.refresh_once()
    wait_until(lambda: not there.registry.draining())
    for lease in held:
        lease.release()
