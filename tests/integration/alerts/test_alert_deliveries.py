"""Change alerts end to end with real peers (docs/alerts.md).

Scans go through the scanner protocol over HTTP, the projection and analysis workers
run as the runner runs them, and deliveries are sent by the delivery job's own code to
a loopback webhook receiver (every signature verified with ``standardwebhooks``), an
Apprise ``json://`` target at the same receiver and an aiosmtpd server.
"""

from __future__ import annotations

import email
import email.utils
import time

import sqlalchemy as sa

from app.alerts.deliveries import claim_next, deliver
from app.db import transaction
from tests.integration.analysis.test_analysis_api import _run_workers, _scan
from tests.support.scanner_protocol import observation

HOSTS = ["192.0.2.1", "192.0.2.2"]


def drain(settings, *, patience: float = 20.0) -> list[str]:
    """Deliver until nothing is pending (waiting out backoffs); the outcomes."""
    outcomes = []
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        claim = claim_next(settings.alerts)
        if claim is not None:
            outcomes.append(deliver(settings, claim))
            continue
        with transaction() as conn:
            pending = conn.execute(
                sa.text("SELECT count(*) FROM alert_deliveries WHERE status = 'pending'")
            ).scalar()
        if not pending:
            return outcomes
        time.sleep(0.05)
    raise AssertionError(f"deliveries still pending after {patience}s: {outcomes}")


def _deliveries() -> list:
    with transaction() as conn:
        return conn.execute(sa.text("SELECT * FROM alert_deliveries ORDER BY created_at, id")).all()


def _new_endpoint_rule(user, receiver) -> None:
    """A webhook channel at ``receiver`` (its secret given to the receiver to verify with)
    and an ``each`` rule on new endpoints sending to it."""
    hook = user.post("/api/alerts/channels", json={"kind": "webhook", "url": receiver.url})
    receiver.secrets.append(hook.get_json()["channel"]["secret"])
    made = user.post(
        "/api/alerts/rules",
        json={"name": "new", "on": ["new"], "channels": [hook.get_json()["channel"]["id"]]},
    )
    assert made.status_code == 201, made.get_json()


def _channels(user, receiver, mailbox) -> dict[str, dict]:
    webhook = user.post(
        "/api/alerts/channels", json={"kind": "webhook", "name": "hook", "url": receiver.url}
    )
    assert webhook.status_code == 201, webhook.get_json()
    receiver.secrets.append(webhook.get_json()["channel"]["secret"])
    apprise = user.post(
        "/api/alerts/channels", json={"kind": "apprise", "url": receiver.apprise_url}
    )
    assert apprise.status_code == 201, apprise.get_json()
    email = user.post(
        "/api/alerts/channels", json={"kind": "email", "recipients": ["ops@example.test"]}
    )
    assert email.status_code == 201, email.get_json()
    return {
        "webhook": webhook.get_json()["channel"],
        "apprise": apprise.get_json()["channel"],
        "email": email.get_json()["channel"],
    }


def test_a_closed_port_is_one_gone_alert_per_rule_and_channel(
    api, settings, receiver, mailbox
) -> None:
    alice, scanner = api.user(), api.scanner()
    channels = _channels(alice, receiver, mailbox)
    ids = [c["id"] for c in channels.values()]
    each = alice.post(
        "/api/alerts/rules",
        json={"name": "gone ports", "on": ["gone"], "channels": ids, "mode": "each"},
    )
    assert each.status_code == 201, each.get_json()
    digest = alice.post(
        "/api/alerts/rules",
        json={
            "name": "all, digested",
            "on": ["new", "gone", "changed", "reappeared"],
            "channels": [channels["webhook"]["id"]],
            "mode": "digest",
        },
    )
    assert digest.status_code == 201

    detected = {"name": "ssh", "product": "OpenSSH", "version": "9.6p1"}
    _scan(alice, scanner, [observation(ip, 22, service=detected) for ip in HOSTS])
    _run_workers(settings)
    drain(settings)
    first = receiver.hooks()
    assert [h.json["type"] for h in first] == ["netmap.digest"]
    assert first[0].json["data"]["counts"]["new"] == 2
    # Messages name the task they are about (``_scan`` names its tasks "c").
    assert first[0].json["data"]["task_name"] == "c"

    # The listener on 192.0.2.2:22 stops; the next scan no longer sees it.
    _scan(alice, scanner, [observation("192.0.2.1", 22, service=detected)])
    _run_workers(settings)
    outcomes = drain(settings)
    assert outcomes == ["delivered"] * 4

    rows = _deliveries()
    assert len(rows) == 5 and {r.status for r in rows} == {"delivered"}
    gone = [r for r in rows if r.event_type == "netmap.change.gone"]
    assert sorted(r.channel_id for r in gone) == sorted(ids)
    hooks = receiver.hooks()
    assert all(h.verified for h in receiver.hooks(ok_only=False))
    assert sorted(h.json["type"] for h in hooks) == [
        "netmap.change.gone",
        "netmap.digest",
        "netmap.digest",
    ]
    change = next(h for h in hooks if h.json["type"] == "netmap.change.gone").json["data"]
    assert change["change"]["ip"] == "192.0.2.2" and change["change"]["old"]["product"] == "OpenSSH"
    assert change["rule"]["name"] == "gone ports" and change["task_name"] == "c"
    assert len(receiver.ids()) == 3 and set(receiver.ids().values()) == {1}
    (posted,) = receiver.apprise_posts()
    assert "192.0.2.2:22/tcp" in posted.json["title"]
    (mail,) = mailbox.messages
    assert mail[0] == ["ops@example.test"] and b"192.0.2.2:22/tcp" in mail[1]
    # RFC 5322's required Date header, in the format it defines.
    sent = email.message_from_bytes(mail[1])
    assert sent["Subject"] == "netmap: gone 192.0.2.2:22/tcp in c"
    assert f"Task: c (#{change['change']['task_id']})" in sent.get_payload(decode=True).decode()
    assert email.utils.parsedate_to_datetime(sent["Date"]).tzinfo is not None

    # The lighter scan: no detection this time. No change, so no alert at all.
    _scan(alice, scanner, [observation("192.0.2.1", 22)])
    _run_workers(settings)
    assert drain(settings) == []
    assert len(_deliveries()) == 5
    (asset,) = alice.get("/api/assets").get_json()["items"]
    assert asset["product"] == "OpenSSH"

    log = alice.get(f"/api/alerts/deliveries?rule={each.get_json()['rule']['id']}").get_json()
    assert len(log["items"]) == 3 and {i["status"] for i in log["items"]} == {"delivered"}
    metrics = api.admin().get("/metrics").get_data(as_text=True)
    assert 'netmap_alert_deliveries{channel_kind="webhook",status="delivered"} 3.0' in metrics
    assert "netmap_alert_oldest_pending_age_seconds 0.0" in metrics


def test_receiver_down_then_up_is_delivered_with_the_same_id(api, settings, receiver) -> None:
    alice, scanner = api.user(), api.scanner()
    _new_endpoint_rule(alice, receiver)
    receiver.fail_next = 4
    _scan(alice, scanner, [observation("192.0.2.1", 80)])
    _run_workers(settings)
    outcomes = drain(settings)
    assert outcomes == ["pending"] * 4 + ["delivered"]
    assert list(receiver.ids().values()) == [5]  # one id, five attempts
    assert [h.status for h in receiver.hooks(ok_only=False)] == [503] * 4 + [200]
    (row,) = _deliveries()
    assert row.status == "delivered" and row.attempts == 5 and row.last_error is None


def test_retries_end_dead_with_the_last_error_and_redeliver_sends_the_same_id(
    api, settings, receiver
) -> None:
    alice, scanner = api.user(), api.scanner()
    _new_endpoint_rule(alice, receiver)
    receiver.fail_next = 1000
    _scan(alice, scanner, [observation("192.0.2.1", 80)])
    _run_workers(settings)
    claim = claim_next(settings.alerts)
    assert deliver(settings, claim) == "pending"
    # The retry window ([alerts] retry_hours) has passed since the first attempt.
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE alert_deliveries SET first_attempt_at = now() - interval '25 hours', "
                "available_at = now()"
            )
        )
    assert drain(settings) == ["dead"]
    (row,) = _deliveries()
    assert row.status == "dead" and row.attempts == 2 and "HTTP 503" in row.last_error
    dead = alice.get("/api/alerts/deliveries?status=dead").get_json()["items"]
    assert [d["id"] for d in dead] == [row.id]

    receiver.fail_next = 0
    again = alice.post(f"/api/alerts/deliveries/{row.id}/redeliver")
    assert again.status_code == 200 and again.get_json()["delivery"]["status"] == "pending"
    assert drain(settings) == ["delivered"]
    assert list(receiver.ids()) == [row.id]
    assert api.user().post(f"/api/alerts/deliveries/{row.id}/redeliver").status_code == 404


def test_each_mode_is_capped_per_change_set_and_the_rest_is_digested(
    api, settings, receiver
) -> None:
    capped = settings.replace(alerts={"max_messages_per_run": 2, "digest_changes": 2})
    alice, scanner = api.user(), api.scanner()
    _new_endpoint_rule(alice, receiver)
    _scan(alice, scanner, [observation(f"192.0.2.{n}", 80) for n in range(1, 6)])
    _run_workers(capped)
    drain(capped)
    types = sorted(h.json["type"] for h in receiver.hooks())
    assert types == ["netmap.change.new"] * 2 + ["netmap.digest"]
    digest = next(h for h in receiver.hooks() if h.json["type"] == "netmap.digest").json["data"]
    assert digest["folded"] and digest["total"] == 3 and digest["counts"]["new"] == 3
    assert len(digest["changes"]) == 2 and digest["more"] == 1


# A runner worker's delivery step, as its own process: the job's claim and run.
_DELIVERY_PROCESS = """
import pickle, sys
from app import db
settings = pickle.loads(open(sys.argv[1], "rb").read())
db.set_engine(db.create_engine(settings.database.url, settings.database, application_name="t"))
from jobs.alert_delivery import AlertDeliveryJob
job = AlertDeliveryJob(settings)
work = job.claim(None)
print(work.id, flush=True)
job.run(None, work)
print("recorded", flush=True)
"""


def test_a_runner_killed_between_send_and_record_sends_the_same_id_again(
    api, settings, receiver, tmp_path
) -> None:
    import os
    import pickle
    import signal
    import subprocess
    import sys

    alice, scanner = api.user(), api.scanner()
    _new_endpoint_rule(alice, receiver)
    _scan(alice, scanner, [observation("192.0.2.1", 80)])
    _run_workers(settings)
    (row,) = _deliveries()

    frozen = tmp_path / "settings.pickle"
    frozen.write_bytes(pickle.dumps(settings))
    receiver.hold = True  # the message arrives; the answer (and so the record) waits
    worker = subprocess.Popen(
        [sys.executable, "-c", _DELIVERY_PROCESS, str(frozen)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert worker.stdout.readline().strip() == row.id
        assert receiver.arrived.wait(60), "the worker never sent the message"
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
    receiver.hold = False
    receiver.release.set()
    (killed,) = _deliveries()
    assert killed.status == "pending" and killed.claim_token is not None  # not recorded

    # Once the dead worker's lease runs out, the next claim sends the same id again.
    assert drain(settings) == ["delivered"]
    assert dict(receiver.ids()) == {row.id: 2}
    assert all(h.verified for h in receiver.hooks(ok_only=False))
    (done,) = _deliveries()
    assert done.status == "delivered" and done.attempts == 2


def test_an_endpoint_back_with_a_new_certificate_is_a_changed_certificate(
    api, settings, receiver
) -> None:
    """An endpoint that was gone and comes back is ``reappeared``; its ``changed_fields``
    name what differs from before it went, and a rule on ``changed`` hears of it when
    that is one of its ``fields`` (or any field, for a rule without ``fields``)."""
    alice, scanner = api.user(), api.scanner()
    hook = alice.post("/api/alerts/channels", json={"kind": "webhook", "url": receiver.url})
    receiver.secrets.append(hook.get_json()["channel"]["secret"])
    channel = hook.get_json()["channel"]["id"]
    rules = {}
    for name, body in [
        ("certs", {"on": ["changed"], "fields": ["cert_sha256"]}),
        ("versions", {"on": ["changed"], "fields": ["version"]}),
        ("any change", {"on": ["changed"]}),
        ("back", {"on": ["reappeared"]}),
    ]:
        made = alice.post("/api/alerts/rules", json={"name": name, "channels": [channel], **body})
        assert made.status_code == 201, made.get_json()
        rules[made.get_json()["rule"]["id"]] = name
    old, renewed = "aa" * 32, "bb" * 32

    def seen(ip: str, cert: str):
        return observation(ip, 80, service={"name": "http", "version": "1"}, tls={"sha256": cert})

    _scan(alice, scanner, [seen("192.0.2.1", old), seen("192.0.2.2", old), seen("192.0.2.3", old)])
    _run_workers(settings)
    _scan(alice, scanner, [seen("192.0.2.3", old)])  # .1 and .2 are down: gone
    _run_workers(settings)
    drain(settings)
    already = {h.headers["webhook-id"] for h in receiver.hooks()}  # not this test's
    # Back: .1 with a renewed certificate, .2 as it was.
    task, _ = _scan(
        alice, scanner, [seen("192.0.2.1", renewed), seen("192.0.2.2", old), seen("192.0.2.3", old)]
    )
    _run_workers(settings)
    drain(settings)

    heard = sorted(
        (rules[h.json["data"]["rule"]["id"]], h.json["data"]["change"]["ip"])
        for h in receiver.hooks()
        if h.headers["webhook-id"] not in already
    )
    assert heard == [
        ("any change", "192.0.2.1"),
        ("back", "192.0.2.1"),
        ("back", "192.0.2.2"),
        ("certs", "192.0.2.1"),
    ]
    message = next(
        h.json
        for h in receiver.hooks()
        if h.headers["webhook-id"] not in already and rules[h.json["data"]["rule"]["id"]] == "certs"
    )
    assert message["type"] == "netmap.change.reappeared"
    change = message["data"]["change"]
    assert change["changed_fields"] == ["cert_sha256"]
    assert (change["old"]["cert_sha256"], change["new"]["cert_sha256"]) == (old, renewed)

    items = alice.get(f"/api/tasks/{task['id']}/changes?kind=reappeared").get_json()["items"]
    assert sorted((i["ip"], i["changed_fields"]) for i in items) == [
        ("192.0.2.1", ["cert_sha256"]),
        ("192.0.2.2", []),
    ]
