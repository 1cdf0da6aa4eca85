"""Digests per run and the ``each`` cap per run (docs/alerts.md, "Modes, per run").

Scans go through the scanner protocol over HTTP; the projection and analysis workers run
as the runner runs them; messages are delivered by the delivery job's code to a loopback
webhook receiver that verifies every signature. A task over three /24 networks is one run
of three executions (``[scan] execution_max_addresses`` 256).
"""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from app.alerts.evaluate import change_set_hook
from app.alerts.run_digests import send_finished_run_digests
from app.analysis.worker import AnalysisWorker
from app.db import transaction
from app.projection.slices import ProjectionWorker
from app.search.postgres_store import PostgresStore
from jobs.alert_conditions import jobs as condition_jobs
from jobs.alert_conditions import run_digests_job
from jobs.base import JobContext
from tests.integration.alerts.test_alert_deliveries import _deliveries as all_deliveries
from tests.integration.alerts.test_alert_deliveries import drain
from tests.integration.analysis.test_analysis_api import _run_workers
from tests.support.projection import drain as drain_projection
from tests.support.scanner_protocol import claim, observation

NETWORKS = ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"]


def _webhooks(user, receiver, n: int) -> list[int]:
    ids = []
    for i in range(n):
        made = user.post(
            "/api/alerts/channels",
            json={"kind": "webhook", "name": f"hook {i}", "url": receiver.url},
        )
        assert made.status_code == 201, made.get_json()
        receiver.secrets.append(made.get_json()["channel"]["secret"])
        ids.append(made.get_json()["channel"]["id"])
    return ids


def _rule(user, name: str, channels: list[int], mode: str) -> int:
    made = user.post(
        "/api/alerts/rules",
        json={"name": name, "on": ["new"], "channels": channels, "mode": mode},
    )
    assert made.status_code == 201, made.get_json()
    return made.get_json()["rule"]["id"]


def _task(user, ports: str = "80") -> dict:
    made = user.post("/api/tasks", json={"name": "three", "targets": NETWORKS, "ports": ports})
    assert made.status_code == 201, made.get_json()
    task = made.get_json()["task"]
    assert task["execution_count"] == 3
    return task


def _digest_task(api, receiver, channels: int):
    """A user with ``channels`` webhooks at ``receiver``, a digest rule on new endpoints
    sending to them, a scanner, and a task of three executions (one run)."""
    alice, scanner = api.user(), api.scanner()
    hooks = _webhooks(alice, receiver, channels)
    _rule(alice, "digest", hooks, "digest")
    return alice, scanner, hooks, _task(alice)


def _finish_next(scanner, hosts: int = 2):
    """Claim the next execution and finish it with ``hosts`` new endpoints in its network."""
    upload = claim(scanner)
    network = upload.execution["targets"][0].split("/")[0].rsplit(".", 1)[0]
    observations = [observation(f"{network}.{n}", 80) for n in range(1, hosts + 1)]
    assert upload.final(0, observations).status_code == 200
    return upload


def _deliveries(kind: str) -> list:
    """The messages of one kind, by rule and channel."""
    rows = [d for d in all_deliveries() if d.message_kind == kind]
    return sorted(rows, key=lambda d: (d.rule_id, d.channel_id, d.id))


def _digests_received(receiver) -> list[dict]:
    return [h.json["data"] for h in receiver.hooks() if h.json["type"] == "netmap.digest"]


def test_a_run_of_three_executions_has_one_digest_per_channel_and_one_each_cap(
    api, settings, receiver
) -> None:
    capped = settings.replace(alerts={"max_messages_per_run": 2, "digest_changes": 3})
    alice, scanner = api.user(), api.scanner()
    hooks = _webhooks(alice, receiver, 2)
    digest_rule = _rule(alice, "digest", hooks, "digest")
    each_rule = _rule(alice, "each", hooks[:1], "each")
    task = _task(alice)
    run_id = task["latest_run"]["id"]

    _finish_next(scanner)
    _run_workers(capped)
    drain(capped)
    # The run goes on: the two single messages of the cap, no digest yet.
    assert [h.json["type"] for h in receiver.hooks()] == ["netmap.change.new"] * 2
    assert _deliveries("digest") == []

    _finish_next(scanner)
    _run_workers(capped)
    assert _deliveries("digest") == [] and len(_deliveries("each")) == 2  # cap reached

    _finish_next(scanner)
    # The run has ended, but its last change set is not committed yet: nothing is due.
    assert send_finished_run_digests(capped) == 0
    _run_workers(capped)
    assert drain(capped) == ["delivered"] * 3

    digests = _deliveries("digest")
    assert [(d.rule_id, d.channel_id) for d in digests] == [
        (digest_rule, hooks[0]),
        (digest_rule, hooks[1]),
        (each_rule, hooks[0]),
    ]
    assert {d.run_id for d in digests} == {run_id} and {d.task_id for d in digests} == {task["id"]}
    received = _digests_received(receiver)
    assert len(received) == 3 and all(h.verified for h in receiver.hooks(ok_only=False))
    assert set(receiver.ids().values()) == {1}
    full = [d for d in received if d["rule"]["id"] == digest_rule]
    assert len(full) == 2
    for data in full:
        assert data["run_id"] == run_id and data["run_status"] == "succeeded"
        assert data["total"] == 6 and data["counts"]["new"] == 6 and not data["folded"]
        assert data["change_sets"] == 3
        assert len(data["changes"]) == 3 and data["more"] == 3
        # Without [alerts] public_url a link is the page's path from the site's root, and
        # it names the console's page of the run's changes.
        assert data["link"] == f"/console/tasks/{task['id']}/changes?run={run_id}"
        page = alice.get(data["link"], headers={"Accept": "text/html"})
        assert page.status_code == 200 and f"run {data['run_number']}" in page.text.lower()
    (folded,) = [d for d in received if d["rule"]["id"] == each_rule]
    # Six new endpoints over the run: two single messages, four folded into the digest.
    assert folded["folded"] and folded["total"] == 4 and folded["counts"]["new"] == 4
    assert len(folded["changes"]) == 3 and folded["more"] == 1
    listed = {c["ip"] for c in folded["changes"]}
    singles = {
        h.json["data"]["change"]["ip"]
        for h in receiver.hooks()
        if h.json["type"] == "netmap.change.new"
    }
    assert not listed & singles  # a folded digest lists what was not sent singly

    # Nothing is left for the periodic job; a lost marker cannot double a digest either.
    assert send_finished_run_digests(capped) == 0
    with transaction() as conn:
        conn.execute(sa.text("UPDATE alert_run_digests SET emitted_at = NULL"))
    assert send_finished_run_digests(capped) == 0
    assert len(_deliveries("digest")) == 3


def test_a_cancelled_run_sends_its_digest_from_the_periodic_job(api, settings, receiver) -> None:
    alice, scanner, _hooks, task = _digest_task(api, receiver, 2)
    run_id = task["latest_run"]["id"]
    _finish_next(scanner, hosts=3)
    _run_workers(settings)
    assert send_finished_run_digests(settings) == 0  # the run is still going

    cancelled = alice.post(f"/api/tasks/{task['id']}/runs/{run_id}/cancel")
    assert cancelled.status_code == 200, cancelled.get_json()
    _run_workers(settings)  # no execution of the run is left to analyse
    assert _deliveries("digest") == []

    assert send_finished_run_digests(settings) == 2
    assert send_finished_run_digests(settings) == 0
    assert drain(settings) == ["delivered"] * 2
    received = _digests_received(receiver)
    assert len(received) == 2 and set(receiver.ids().values()) == {1}
    for data in received:
        assert data["run_status"] == "cancelled" and data["counts"]["new"] == 3


def test_a_run_whose_last_execution_failed_sends_its_digest_from_the_periodic_job(
    api, settings, receiver
) -> None:
    _alice, scanner, _hooks, task = _digest_task(api, receiver, 1)
    _finish_next(scanner)
    _finish_next(scanner)
    _run_workers(settings)
    assert _deliveries("digest") == []
    failing = claim(scanner)
    failed = scanner.post(
        f"/api/scanner/executions/{failing.id}/fail",
        json={"claim_token": failing.token, "reason": "nmap crashed"},
    )
    assert failed.status_code == 200, failed.get_json()

    # The runner's periodic job sends it (one tick, as a runner worker runs it).
    job = run_digests_job(settings)
    assert job.name in [j.name for j in condition_jobs(settings)]
    context = JobContext(
        settings=settings, worker_id=0, stopping=threading.Event(), cancelled=threading.Event()
    )
    work = job.claim(context)
    assert work is not None
    job.run(context, work)
    assert len(_deliveries("digest")) == 1
    drain(settings)
    (data,) = _digests_received(receiver)
    assert data["run_status"] == "partial" and data["counts"]["new"] == 4
    assert data["change_sets"] == 2 and data["task_id"] == task["id"]


def _two_execution_run(api, receiver) -> tuple[list[int], int, dict]:
    """Two webhook channels, a digest rule, and a run of two finished executions:
    (channels, run id, task with its owner's id as ``owner_id``)."""
    alice, scanner = api.user(), api.scanner()
    hooks = _webhooks(alice, receiver, 2)
    _rule(alice, "digest", hooks, "digest")
    made = alice.post("/api/tasks", json={"name": "two", "targets": NETWORKS[:2], "ports": "80"})
    assert made.status_code == 201
    _finish_next(scanner)
    _finish_next(scanner)
    task = {**made.get_json()["task"], "owner_id": alice.id}
    return hooks, task["latest_run"]["id"], task


def _hide_from_claims(execution_id: int, hidden: bool) -> None:
    """Mark the execution's queue row processed (or not again), so the owner's next
    execution can be claimed while this one's claim is held."""
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_analysis_queue SET processed_at = CASE WHEN :hidden THEN now() END "
                "WHERE execution_id = :e"
            ),
            {"e": execution_id, "hidden": hidden},
        )


def test_two_analysers_racing_on_a_run_make_one_digest_per_channel(api, settings, receiver) -> None:
    hooks, run_id, _task_row = _two_execution_run(api, receiver)
    store = PostgresStore(settings)
    try:
        drain_projection(ProjectionWorker(settings, store))
        # Both change sets of the run are analysed at once by two workers. (One owner's
        # executions are normally claimed one after the other: the first is hidden while
        # the second is claimed.)
        workers = [
            AnalysisWorker(settings, store, on_change_set=change_set_hook(settings.alerts, store))
            for _ in range(2)
        ]
        first = workers[0].claim()
        _hide_from_claims(first.execution_id, True)
        second = workers[1].claim()
        _hide_from_claims(first.execution_id, False)
        assert second is not None and second.execution_id != first.execution_id
        start = threading.Barrier(2, timeout=60)
        results: dict[int, str] = {}

        def analyse(worker, work) -> None:
            start.wait()
            results[work.execution_id] = worker.run(work).result

        threads = [
            threading.Thread(target=analyse, args=pair)
            for pair in ((workers[0], first), (workers[1], second))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        store.close()
    assert sorted(results.values()) == ["completed", "completed"]

    # Whichever committed second saw the other's change set and sent the digests.
    digests = _deliveries("digest")
    assert sorted(d.channel_id for d in digests) == sorted(hooks)
    assert {d.run_id for d in digests} == {run_id}
    assert send_finished_run_digests(settings) == 0
    drain(settings)
    received = _digests_received(receiver)
    assert len(received) == 2
    assert all(d["counts"]["new"] == 4 and d["change_sets"] == 2 for d in received)


def test_two_last_change_sets_deciding_at_once_take_turns_on_the_run(
    api, settings, receiver
) -> None:
    """The decision itself, with both transactions inside it at the same moment: each
    commits its own change set (queue row to ``publish``) after deciding. The run's lock
    makes the second decide after the first committed, so it sends the digests; without
    it both would see the other's change set pending and neither would."""
    from app.alerts.evaluate import ChangeSet, alerts_for_change_set

    hooks, run_id, task = _two_execution_run(api, receiver)
    _run_workers(settings)
    # Back to the moment before either change set committed, digests unsent.
    with transaction() as conn:
        executions = list(
            conn.execute(
                sa.text("SELECT id FROM scan_executions WHERE run_id = :r ORDER BY id"),
                {"r": run_id},
            ).scalars()
        )
        conn.execute(sa.text("DELETE FROM alert_deliveries WHERE message_kind = 'digest'"))
        conn.execute(sa.text("UPDATE alert_run_digests SET emitted_at = NULL"))
        conn.execute(
            sa.text(
                "UPDATE scan_analysis_queue SET processed_at = NULL, phase = 'analyse' "
                "WHERE execution_id = ANY(:ids)"
            ),
            {"ids": executions},
        )

    owner = task["owner_id"]
    inside = threading.Barrier(2, timeout=60)
    made: dict[int, dict] = {}
    backends: dict[int, int] = {}
    decided = {e: threading.Event() for e in executions}

    def until_the_other_decided_or_waits(me: int) -> None:
        """Hold this transaction open until the other one has decided too, or is waiting
        for a lock this one holds."""
        other = next(e for e in executions if e != me)
        for _ in range(6000):
            if decided[other].is_set():
                return
            with transaction() as conn:
                waits = conn.execute(
                    sa.text("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = :p"),
                    {"p": backends[other]},
                ).scalar()
            if waits:
                return
            time.sleep(0.01)
        raise AssertionError("the other transaction neither decided nor waited")

    def decide(execution_id: int) -> None:
        with transaction() as conn:
            backends[execution_id] = conn.execute(sa.text("SELECT pg_backend_pid()")).scalar()
            inside.wait()
            change_set = ChangeSet(owner, execution_id, task["id"], run_id)
            made[execution_id] = alerts_for_change_set(conn, settings.alerts, change_set, changes=0)
            decided[execution_id].set()
            until_the_other_decided_or_waits(execution_id)
            conn.execute(
                sa.text("UPDATE scan_analysis_queue SET phase = 'publish' WHERE execution_id = :e"),
                {"e": execution_id},
            )

    threads = [threading.Thread(target=decide, args=(e,)) for e in executions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(m.get("digest", 0) for m in made.values()) == [0, 2]
    assert sorted(d.channel_id for d in _deliveries("digest")) == sorted(hooks)


def test_a_second_digest_for_the_same_rule_run_and_channel_is_refused(api, settings) -> None:
    alice = api.user()
    channel = alice.post(
        "/api/alerts/channels", json={"kind": "email", "recipients": ["ops@example.test"]}
    ).get_json()["channel"]["id"]
    rule = _rule(alice, "r", [channel], "digest")
    task = _task(alice)
    row = {
        "rule": rule,
        "channel": channel,
        "owner": alice.id,
        "run": task["latest_run"]["id"],
    }
    insert = sa.text(
        "INSERT INTO alert_deliveries (id, rule_id, channel_id, owner_id, run_id, message_kind, "
        "event_type, payload) VALUES (:id, :rule, :channel, :owner, :run, 'digest', "
        "'netmap.digest', '{}')"
    )
    with transaction() as conn:
        conn.execute(insert, {**row, "id": "msg_first"})
    with pytest.raises(sa.exc.IntegrityError), transaction() as conn:
        conn.execute(insert, {**row, "id": "msg_second"})


def test_a_digest_the_periodic_job_could_not_write_is_sent_at_a_later_tick(
    api, settings, receiver
) -> None:
    alice, scanner, _hooks, task = _digest_task(api, receiver, 1)
    _finish_next(scanner)
    _run_workers(settings)
    cancelled = alice.post(f"/api/tasks/{task['id']}/runs/{task['latest_run']['id']}/cancel")
    assert cancelled.status_code == 200
    with transaction() as conn:
        # The messages' table is out of reach: the tick's transaction fails and rolls back.
        conn.execute(sa.text("ALTER TABLE alert_deliveries RENAME TO alert_deliveries_away"))
    try:
        assert send_finished_run_digests(settings) == 0
    finally:
        with transaction() as conn:
            conn.execute(sa.text("ALTER TABLE alert_deliveries_away RENAME TO alert_deliveries"))
    with transaction() as conn:
        unsent = conn.execute(
            sa.text("SELECT count(*) FROM alert_run_digests WHERE emitted_at IS NULL")
        ).scalar()
    assert unsent == 1  # not marked: nothing is lost
    assert send_finished_run_digests(settings) == 1
    drain(settings)
    (data,) = _digests_received(receiver)
    assert data["run_status"] == "cancelled" and data["counts"]["new"] == 2
