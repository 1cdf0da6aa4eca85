"""Condition alert rules (docs/alerts.md, "Condition rules"): ``scanner_offline`` and
``certificate_expires``, evaluated by the runner's periodic jobs, one message per
episode whatever the number of runners or ticks, delivered through the leased outbox to
a loopback receiver that verifies every signature."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from app.alerts.conditions import (
    evaluate_certificate_expiry,
    evaluate_run_failed,
    evaluate_scanner_offline,
)
from app.alerts.senders import Message, summary_text
from app.db import transaction
from app.search import open_store
from jobs.alert_conditions import certificate_expiry_job, scanner_offline_job
from jobs.base import JobContext
from tests.integration.alerts.test_alert_deliveries import drain
from tests.integration.test_search_api import _publish, _scan
from tests.support.scanner_protocol import claim, make_task, observation


def _webhook(user, receiver) -> int:
    created = user.post(
        "/api/alerts/channels", json={"kind": "webhook", "name": "hook", "url": receiver.url}
    )
    assert created.status_code == 201, created.get_json()
    receiver.secrets.append(created.get_json()["channel"]["secret"])
    return created.get_json()["channel"]["id"]


def _rule(user, **body) -> dict:
    created = user.post("/api/alerts/rules", json={"name": "condition", **body})
    assert created.status_code == 201, created.get_json()
    return created.get_json()["rule"]


def _messages(rule_id: int) -> list:
    with transaction() as conn:
        return conn.execute(
            sa.text(
                "SELECT id, event_type, payload, channel_id FROM alert_deliveries "
                "WHERE rule_id = :r ORDER BY created_at, id"
            ),
            {"r": rule_id},
        ).all()


def _silence(scanner_id: int, seconds: float) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scanners SET last_seen_at = now() - make_interval(secs => :s) "
                "WHERE id = :id"
            ),
            {"s": seconds, "id": scanner_id},
        )


def _backdate_rule(rule_id: int) -> None:
    with transaction() as conn:
        conn.execute(
            sa.text("UPDATE alert_rules SET created_at = now() - interval '1 day' WHERE id = :id"),
            {"id": rule_id},
        )


def test_a_scanner_going_offline_is_told_once_and_back_online_once(api, settings, receiver) -> None:
    admin, user = api.admin(), api.user()
    offline = settings.scan.scanner_offline_seconds
    rule = _rule(
        admin,
        on=["scanner_offline"],
        back_online=True,
        channels=[_webhook(admin, receiver)],
    )
    assert rule["on"] == ["scanner_offline"] and rule["back_online"] is True
    # A user's rule sees only scanners the user created (none: only admins create them).
    user_rule = _rule(user, on=["scanner_offline"], channels=[_webhook(user, receiver)])
    _backdate_rule(rule["id"])
    _backdate_rule(user_rule["id"])
    scanner = api.scanner()
    never = api.scanner()  # never seen: never offline
    assert scanner.claim().status_code == 204
    evaluate_scanner_offline(settings)
    assert _messages(rule["id"]) == []

    # Silent past the window; two runners evaluate at the same moment: one message.
    _silence(scanner.id, offline + 5)
    start = threading.Barrier(2)

    def tick() -> None:
        start.wait()
        evaluate_scanner_offline(settings)

    threads = [threading.Thread(target=tick) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    evaluate_scanner_offline(settings)  # a later tick, or a restarted runner
    (message,) = _messages(rule["id"])
    assert message.event_type == "netmap.scanner.offline"
    assert message.payload["scanner"] == {
        "id": scanner.id,
        "name": scanner.name,
        "last_seen_at": message.payload["scanner"]["last_seen_at"],
    }
    assert message.payload["status"] == "offline"
    assert message.payload["link"] == "/console/scanners"  # without [alerts] public_url
    assert never.id not in {m.payload["scanner"]["id"] for m in _messages(rule["id"])}
    assert _messages(user_rule["id"]) == []

    # Back: one "online" message, then nothing more while it stays online.
    assert scanner.claim().status_code == 204
    evaluate_scanner_offline(settings)
    evaluate_scanner_offline(settings)
    kinds = [m.event_type for m in _messages(rule["id"])]
    assert kinds == ["netmap.scanner.offline", "netmap.scanner.online"]
    went, back = _messages(rule["id"])
    assert went.payload["offline_for_seconds"] is None
    # Away from the last sign before the silence to the claim that ended it.
    assert offline + 5 <= back.payload["offline_for_seconds"] <= offline + 65
    assert back.payload["offline_since"] == went.payload["offline_since"]

    # Silent again: a new episode, a new message.
    _silence(scanner.id, offline + 60)
    evaluate_scanner_offline(settings)
    kinds = [m.event_type for m in _messages(rule["id"])]
    assert kinds == ["netmap.scanner.offline", "netmap.scanner.online", "netmap.scanner.offline"]
    ids = [m.id for m in _messages(rule["id"])]
    assert len(set(ids)) == 3

    # The messages go out through the leased deliveries, signed, each id once.
    assert set(drain(settings)) == {"delivered"}
    hooks = [h for h in receiver.hooks() if h.headers["webhook-id"] in ids]
    assert sorted(h.headers["webhook-id"] for h in hooks) == sorted(ids)
    assert all(h.verified for h in hooks)
    title, text = summary_text(
        Message(ids[0], kinds[0], datetime.now(UTC), _messages(rule["id"])[0].payload)
    )
    assert title == f"netmap: scanner {scanner.name} is offline" and "Last sign of life" in text


def test_a_restart_of_netmap_is_no_scanner_silence(api, settings, receiver) -> None:
    """netmap was down for longer than the window; its agents retried all along. The
    runner that starts does not call them offline before they had the window to come
    back (it did, a second after its start, and 'online' at their next claim)."""
    admin = api.admin()
    offline = settings.scan.scanner_offline_seconds
    rule = _rule(admin, on=["scanner_offline"], channels=[_webhook(admin, receiver)])
    _backdate_rule(rule["id"])
    scanner = api.scanner()
    assert scanner.claim().status_code == 204
    _silence(scanner.id, offline + 60)  # the last claim before the stop
    just_started = datetime.now(UTC)
    evaluate_scanner_offline(settings, watching_since=just_started)
    assert _messages(rule["id"]) == []
    # The agent is back at its next claim: nothing was ever said.
    assert scanner.claim().status_code == 204
    evaluate_scanner_offline(settings, watching_since=just_started)
    assert _messages(rule["id"]) == []
    # A scanner still silent once the runner has watched for the window is offline.
    _silence(scanner.id, offline + 60)
    watched = datetime.now(UTC) - timedelta(seconds=offline + 1)
    evaluate_scanner_offline(settings, watching_since=watched)
    assert [m.event_type for m in _messages(rule["id"])] == ["netmap.scanner.offline"]


def test_a_scanner_already_offline_when_the_rule_is_made_is_not_reported(
    api, settings, receiver
) -> None:
    admin = api.admin()
    scanner = api.scanner()
    assert scanner.claim().status_code == 204
    _silence(scanner.id, 86400 * 30)
    rule = _rule(admin, on=["scanner_offline"], channels=[_webhook(admin, receiver)])
    evaluate_scanner_offline(settings)
    assert [m.payload["scanner"]["id"] for m in _messages(rule["id"])] == []


def test_the_condition_jobs_run_on_one_runner_at_a_time(api, settings) -> None:
    context = JobContext(
        settings=settings, worker_id=1, stopping=threading.Event(), cancelled=threading.Event()
    )
    for make in (scanner_offline_job, certificate_expiry_job):
        first, second = make(settings), make(settings)
        lease = first.claim(context)
        assert lease is not None
        assert second.claim(context) is None  # the other runner: the lease is held
        first.run(context, lease)
        with transaction() as conn:
            row = conn.execute(
                sa.text(
                    "SELECT claim_token, last_error, runs FROM runner_periodic_jobs WHERE name = :n"
                ),
                {"n": first.name},
            ).one()
        assert row.claim_token is None and row.last_error is None and row.runs >= 1


def _expiring(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _tls(days: float, fingerprint: str, name: str) -> dict:
    return {
        "subject_cn": name,
        "issuer": "CN=Test CA",
        "not_after": _expiring(days),
        "sha256": fingerprint,
    }


def test_an_expiring_certificate_is_told_once_per_rule_and_threshold(
    api, app, settings, receiver
) -> None:
    user, scanner = api.user(), api.scanner()
    soon, later = "ab" * 32, "cd" * 32
    _, upload = _scan(
        user,
        scanner,
        ["192.0.2.0/28"],
        [
            observation("192.0.2.1", 443, tls=_tls(10, soon, "shop.example.com")),
            observation("192.0.2.2", 443, tls=_tls(10, soon, "shop.example.com")),
            observation("192.0.2.3", 8443, tls=_tls(400, later, "internal")),
            observation("192.0.2.4", 22),
        ],
    )
    _publish(app, upload.id)
    channel = _webhook(user, receiver)
    rule = _rule(user, on=["certificate_expires"], days=30, channels=[channel])
    assert rule["days"] == 30
    other_port = _rule(
        user, on=["certificate_expires"], days=30, channels=[channel], filter={"ports": [8443]}
    )
    store = open_store(settings)
    try:
        evaluate_certificate_expiry(settings, store)
        evaluate_certificate_expiry(settings, store)  # the next tick: already told
        (message,) = _messages(rule["id"])
        assert message.event_type == "netmap.certificate.expires"
        cert = message.payload["certificate"]
        assert cert["fingerprint"] == soon and cert["subject_cn"] == "shop.example.com"
        assert cert["days_left"] in (9, 10) and cert["expired"] is False
        assert message.payload["endpoint_count"] == 2
        assert sorted(e["ip"] for e in message.payload["endpoints"]) == ["192.0.2.1", "192.0.2.2"]
        assert message.payload["rule"] == {"id": rule["id"], "name": "condition", "days": 30}
        assert message.payload["link"] == f"/console/assets?q=cert.fingerprint:{soon}"
        assert _messages(other_port["id"]) == []  # its certificate is 400 days away

        # A threshold the certificate has not crossed yet: nothing; a new crossed one: once.
        assert user.patch(f"/api/alerts/rules/{rule['id']}", json={"days": 5}).status_code == 200
        evaluate_certificate_expiry(settings, store)
        assert len(_messages(rule["id"])) == 1
        assert user.patch(f"/api/alerts/rules/{rule['id']}", json={"days": 15}).status_code == 200
        evaluate_certificate_expiry(settings, store)
        evaluate_certificate_expiry(settings, store)
        assert len(_messages(rule["id"])) == 2
    finally:
        store.close()

    ids = {m.id for m in _messages(rule["id"])}
    assert set(drain(settings)) == {"delivered"}
    hooks = [h for h in receiver.hooks() if h.headers["webhook-id"] in ids]
    assert len(hooks) == 2 and all(h.verified for h in hooks)
    title, text = summary_text(
        Message(message.id, message.event_type, datetime.now(UTC), message.payload)
    )
    assert title.startswith("netmap: certificate shop.example.com expires in")
    assert "192.0.2.1:443/tcp" in text and soon in text


def test_condition_rules_are_validated_naming_the_field(api) -> None:
    user = api.user()
    channel = user.post(
        "/api/alerts/channels", json={"kind": "email", "recipients": ["ops@example.test"]}
    ).get_json()["channel"]["id"]
    base = {"name": "c", "channels": [channel]}
    cases = [
        ({"on": ["certificate_expires"]}, "days"),
        ({"on": ["certificate_expires"], "days": 0}, "days"),
        ({"on": ["certificate_expires"], "days": "7"}, "days"),
        ({"on": ["certificate_expires"], "days": 7, "filter": {"tasks": [1]}}, "filter.tasks"),
        ({"on": ["scanner_offline"], "back_online": "yes"}, "back_online"),
        ({"on": ["scanner_down"]}, "on"),
        ({"on": ["run_failure"]}, "on"),
    ]
    for body, field in cases:
        response = user.post("/api/alerts/rules", json={**base, **body})
        assert response.status_code == 400, (body, response.get_json())
        assert response.get_json()["error"]["details"]["field"] == field, body
    made = user.post(
        "/api/alerts/rules", json={**base, "on": ["gone", "scanner_offline"]}
    ).get_json()["rule"]
    assert made["days"] is None and made["back_online"] is False
    # Adding certificate_expires later still needs days.
    patched = user.patch(f"/api/alerts/rules/{made['id']}", json={"on": ["certificate_expires"]})
    assert patched.status_code == 400
    assert patched.get_json()["error"]["details"]["field"] == "days"
    patched = user.patch(
        f"/api/alerts/rules/{made['id']}", json={"on": ["certificate_expires"], "days": 21}
    )
    assert patched.status_code == 200 and patched.get_json()["rule"]["days"] == 21


def _failed_run(user, scanner, targets: list[str]) -> dict:
    created = user.post(
        "/api/tasks",
        json={"name": "nightly", "targets": targets, "ports": "80", "profile": "quick"},
    )
    assert created.status_code == 201, created.get_json()
    task = created.get_json()["task"]
    while (claim := scanner.claim()).status_code == 200:
        execution = claim.get_json()["execution"]
        failed = scanner.post(
            f"/api/scanner/executions/{execution['id']}/fail",
            json={"claim_token": execution["claim_token"], "reason": "nmap exited 1"},
        )
        assert failed.status_code == 200, failed.get_json()
    (run,) = user.get(f"/api/tasks/{task['id']}/runs").get_json()["items"]
    return {"task": task, "run": run}


def test_a_failed_run_is_told_once_to_the_rules_that_see_it(api, settings, receiver) -> None:
    alice, bob, scanner = api.user(), api.user(), api.scanner()
    hook = _webhook(alice, receiver)
    rule = _rule(alice, on=["run_failed"], channels=[hook])
    assert rule["on"] == ["run_failed"]
    other_task = alice.post(
        "/api/tasks",
        json={"name": "other", "targets": ["198.51.100.1"], "ports": "80", "scan": False},
    ).get_json()["task"]
    other_task_rule = _rule(
        alice, on=["run_failed"], channels=[hook], filter={"tasks": [other_task["id"]]}
    )
    bobs = _rule(bob, on=["run_failed"], channels=[_webhook(bob, receiver)])
    failed = _failed_run(alice, scanner, ["192.0.2.1"])
    assert failed["run"]["status"] == "failed"

    # Two evaluations at the same moment (two runners) and a later tick: one message.
    results: list[dict] = []
    threads = [
        threading.Thread(target=lambda: results.append(evaluate_run_failed(settings)))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(sum(r.values()) for r in results) == [0, 1]
    assert evaluate_run_failed(settings) == {}
    (message,) = _messages(rule["id"])
    assert message.event_type == "netmap.run.failed"
    run = message.payload["run"]
    assert (run["id"], run["number"], run["task_id"]) == (
        failed["run"]["id"],
        1,
        failed["task"]["id"],
    )
    assert (run["executions"], run["failed_executions"]) == (1, 1)
    assert message.payload["link"] == f"/console/tasks/{failed['task']['id']}"
    assert _messages(other_task_rule["id"]) == [] and _messages(bobs["id"]) == []
    title, body = summary_text(
        Message(message.id, message.event_type, datetime.now(UTC), message.payload)
    )
    assert title == "netmap: run 1 of nightly failed" and "1 of 1 execution(s) failed" in body

    # Delivered through the leased outbox, signed.
    drain(settings)
    (hook_call,) = [h for h in receiver.hooks() if h.json["type"] == "netmap.run.failed"]
    assert hook_call.verified and hook_call.headers["webhook-id"] == message.id

    # A run that ended before a rule was made is not that rule's news; a later one is.
    late = _rule(alice, on=["run_failed"], channels=[hook])
    assert evaluate_run_failed(settings) == {}
    assert _messages(late["id"]) == []
    again = alice.post(f"/api/tasks/{failed['task']['id']}/runs")
    assert again.status_code == 201, again.get_json()
    execution = scanner.claim().get_json()["execution"]
    scanner.post(
        f"/api/scanner/executions/{execution['id']}/fail",
        json={"claim_token": execution["claim_token"]},
    )
    assert evaluate_run_failed(settings) == {"netmap.run.failed": 2}
    assert [m.payload["run"]["number"] for m in _messages(late["id"])] == [2]


def test_run_failed_rules_are_evaluated_by_a_runner_job(settings) -> None:
    from jobs.alert_conditions import jobs

    names = [job.name for job in jobs(settings)]
    assert "alert-run-failed" in names


def test_a_scanner_busy_with_a_long_scan_is_not_offline(api, settings, receiver) -> None:
    """Its agent renews the lease a third of the lease into it: a scan can be silent for
    longer than ``scanner_offline_seconds``. While it holds a live lease it is busy, as the
    Scanners page says; once the lease has run out, its silence is an outage."""
    admin, user = api.admin(), api.user()
    offline = settings.scan.scanner_offline_seconds
    rule = _rule(admin, on=["scanner_offline"], channels=[_webhook(admin, receiver)])
    _backdate_rule(rule["id"])
    scanner = api.scanner()
    make_task(user)
    claimed = claim(scanner)
    _silence(scanner.id, offline + 5)  # the scan runs on, silent past the window
    evaluate_scanner_offline(settings)
    assert _messages(rule["id"]) == []
    with transaction() as conn:  # the lease runs out: the agent is gone
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET lease_expires_at = now() - interval '1 second' "
                "WHERE id = :id"
            ),
            {"id": claimed.id},
        )
    evaluate_scanner_offline(settings)
    assert [m.event_type for m in _messages(rule["id"])] == ["netmap.scanner.offline"]
