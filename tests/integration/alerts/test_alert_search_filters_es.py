"""Alert rules filtered by a search on the Elasticsearch store (docs/alerts.md, "Search
filters"): the rules without a search are evaluated in the analysis's transaction; the
search-filtered ones right after it commits, by asking the store which changed
endpoints' current assets each search finds; the ``alert-searched-changes`` job finishes
what a crash or an outage left pending, once; a run's digest waits for them.

Scans go through the scanner protocol into an app serving the Elasticsearch store (the
simulator, or a real cluster when configured); the projection and analysis workers run
as the runner runs them; messages are read from the deliveries outbox.
"""

from __future__ import annotations

import logging
import threading

import sqlalchemy as sa

from app.alerts.evaluate import change_set_hook
from app.alerts.run_digests import send_finished_run_digests
from app.alerts.searched_changes import evaluate_due, evaluate_pending, follow_up
from app.analysis.worker import AnalysisWorker
from app.db import transaction
from app.projection.slices import ProjectionWorker
from app.search.elasticsearch_store import ElasticsearchStore
from jobs.alert_conditions import jobs as condition_jobs
from jobs.alert_conditions import searched_changes_job
from jobs.base import JobContext
from tests.integration.alerts.test_alert_deliveries import drain
from tests.integration.alerts.test_alert_search_filters import _messages, _rule, _search
from tests.integration.alerts.test_alerts_api import _hook
from tests.integration.analysis.test_analysis_api import _scan
from tests.support.projection import drain as drain_projection
from tests.support.scanner_protocol import claim, observation


def _run_workers(settings, *, follow_up_store: ElasticsearchStore | None = None) -> None:
    """Projection, then analysis with the alerts wired as the runner wires them;
    ``follow_up_store`` is the store the step after the commit asks (default: the
    workers' own). Use ``_crashed_workers`` for a worker that dies before that step."""
    _workers(settings, follow=True, follow_up_store=follow_up_store)


def _crashed_workers(settings) -> None:
    """The analysis commits its change sets and the worker dies before the next step."""
    _workers(settings, follow=False, follow_up_store=None)


def _workers(settings, *, follow: bool, follow_up_store) -> None:
    store = ElasticsearchStore(settings.elasticsearch)
    try:
        drain_projection(ProjectionWorker(settings, store))
        after = follow_up(settings.alerts, follow_up_store or store) if follow else None
        worker = AnalysisWorker(
            settings,
            store,
            on_change_set=change_set_hook(settings.alerts, store),
            after_change_set=after,
        )
        while (work := worker.claim()) is not None:
            assert worker.run(work).result == "completed"
    finally:
        store.close()


def _digest_rule(user, channel: dict, query: str) -> dict:
    """A digest-mode rule on new changes, filtered by ``query``."""
    made = user.post(
        "/api/alerts/rules",
        json={
            "name": "d",
            "on": ["new"],
            "channels": [channel["id"]],
            "mode": "digest",
            "filter": {"query": query},
        },
    )
    assert made.status_code == 201, made.get_json()
    return made.get_json()["rule"]


def _pending() -> list[int]:
    with transaction() as conn:
        return list(
            conn.execute(
                sa.text("SELECT execution_id FROM alert_searched_pending ORDER BY 1")
            ).scalars()
        )


def _digests(rule_id: int) -> list[dict]:
    with transaction() as conn:
        return [
            row.payload
            for row in conn.execute(
                sa.text(
                    "SELECT payload FROM alert_deliveries "
                    "WHERE rule_id = :r AND message_kind = 'digest' ORDER BY id"
                ),
                {"r": rule_id},
            )
        ]


def test_a_gone_ssh_port_reaches_the_rule_on_gone_filtered_by_port_22(es, receiver) -> None:
    settings, api = es
    alice, scanner = api.user(), api.scanner()
    channel = _hook(alice, receiver)
    gone_ssh = _rule(alice, channel, ["gone"], query="port:22").get_json()["rule"]
    web = _search(alice, "port:80 service:http", name="web")
    new_web = _rule(alice, channel, ["new"], search=web["id"]).get_json()["rule"]
    only_gone = _rule(alice, channel, ["new", "gone"], query="status:gone").get_json()["rule"]
    ssh_banner = _rule(alice, channel, ["new"], query='banner:"OpenSSH_9"').get_json()["rule"]
    plain = _rule(alice, channel, ["new"], ports=[80]).get_json()["rule"]

    first = [
        observation(ip, 22, service={"name": "ssh", "banner": f"SSH-2.0-OpenSSH_9.{i}"})
        for i, ip in enumerate(("192.0.2.1", "192.0.2.2"))
    ] + [
        observation("192.0.2.3", 22, service={"name": "ssh", "banner": "SSH-2.0-dropbear"}),
        observation("192.0.2.1", 80, service={"name": "http"}),
    ]
    _scan(alice, scanner, first)
    _run_workers(settings)
    # The saved search and the banner (read from the asset, not the change) select; a new
    # endpoint's asset is open, so ``status:gone`` finds none of them.
    assert _messages(new_web["id"]) == [("netmap.change.new", "192.0.2.1", 80)]
    assert _messages(ssh_banner["id"]) == [
        ("netmap.change.new", "192.0.2.1", 22),
        ("netmap.change.new", "192.0.2.2", 22),
    ]
    assert _messages(plain["id"]) == [("netmap.change.new", "192.0.2.1", 80)]
    assert _messages(gone_ssh["id"]) == [] and _messages(only_gone["id"]) == []
    assert _pending() == []

    # The SSH ports stop answering: the rule on ``gone`` filtered by ``port:22`` hears of
    # them, and of nothing else; ``status:gone`` finds the gone changes only.
    _scan(alice, scanner, [o for o in first if o["port"] == 80])
    _run_workers(settings)
    gone = [
        ("netmap.change.gone", "192.0.2.1", 22),
        ("netmap.change.gone", "192.0.2.2", 22),
        ("netmap.change.gone", "192.0.2.3", 22),
    ]
    assert _messages(gone_ssh["id"]) == gone
    assert _messages(only_gone["id"]) == gone
    assert len(_messages(new_web["id"])) == 1 and len(_messages(ssh_banner["id"])) == 2

    # The saved search is read when the change set is evaluated: edited, it finds what the
    # old text would not have found, and no longer what it would have.
    edited = alice.patch(f"/api/searches/{web['id']}", json={"query": "port:22"})
    assert edited.status_code == 200
    _scan(
        alice,
        scanner,
        [
            *first,  # the SSH ports are back: reappeared, not new
            observation("192.0.2.3", 80, service={"name": "http"}),
            observation("192.0.2.4", 22, service={"name": "ssh"}),
        ],
    )
    _run_workers(settings)
    assert _messages(new_web["id"])[1:] == [("netmap.change.new", "192.0.2.4", 22)]
    assert _messages(plain["id"])[1:] == [("netmap.change.new", "192.0.2.3", 80)]
    assert _pending() == []


def test_a_crash_after_the_commit_is_recovered_by_the_job_once(es, receiver) -> None:
    settings, api = es
    alice, scanner = api.user(), api.scanner()
    channel = _hook(alice, receiver)
    each = _rule(alice, channel, ["new"], query="port:22").get_json()["rule"]
    digest = _digest_rule(alice, channel, "port:22")
    plain = _rule(alice, channel, ["new"], ports=[80]).get_json()["rule"]
    observations = [observation(ip, 22) for ip in ("192.0.2.1", "192.0.2.2")] + [
        observation("192.0.2.1", 80)
    ]

    _scan(alice, scanner, observations)
    _crashed_workers(settings)
    # The rule without a search was evaluated with the change set; the others wait, and so
    # does the run's digest, although the run is over.
    assert _messages(plain["id"]) == [("netmap.change.new", "192.0.2.1", 80)]
    assert _messages(each["id"]) == [] and _digests(digest["id"]) == []
    (execution_id,) = _pending()
    assert send_finished_run_digests(settings) == 0
    with transaction() as conn:
        emitted = conn.execute(
            sa.text("SELECT count(*) FROM alert_run_digests WHERE emitted_at IS NOT NULL")
        ).scalar()
    assert emitted == 0

    # The job (as the runner runs it) finishes the pending execution.
    job = searched_changes_job(settings)
    assert job.name in [j.name for j in condition_jobs(settings)]
    context = JobContext(
        settings=settings, worker_id=0, stopping=threading.Event(), cancelled=threading.Event()
    )
    work = job.claim(context)
    assert work is not None
    job.run(context, work)
    assert _pending() == []
    expected = [("netmap.change.new", "192.0.2.1", 22), ("netmap.change.new", "192.0.2.2", 22)]
    assert _messages(each["id"]) == expected
    (data,) = _digests(digest["id"])
    assert data["total"] == 2 and data["counts"]["new"] == 2 and data["change_sets"] == 1

    # Again, by the job or a late worker: nothing more, and each message is delivered once.
    store = ElasticsearchStore(settings.elasticsearch)
    try:
        assert evaluate_due(settings.alerts, store) == 0
        assert evaluate_pending(settings.alerts, store, execution_id) == 0
    finally:
        store.close()
    assert send_finished_run_digests(settings) == 0
    assert _messages(each["id"]) == expected and len(_digests(digest["id"])) == 1
    assert drain(settings) == ["delivered"] * 4
    assert set(receiver.ids().values()) == {1}


def test_a_rule_made_after_the_change_set_committed_does_not_hear_of_it(es, receiver) -> None:
    # On PostgreSQL the rules are read in the analysis's transaction; evaluated later, the
    # change set is still compared with the rules that existed when it committed.
    settings, api = es
    alice, scanner = api.user(), api.scanner()
    channel = _hook(alice, receiver)
    before = _rule(alice, channel, ["new"], query="port:22").get_json()["rule"]
    _scan(alice, scanner, [observation("192.0.2.1", 22)])
    _crashed_workers(settings)
    (execution_id,) = _pending()
    after = _rule(alice, channel, ["new"], query="port:22").get_json()["rule"]

    store = ElasticsearchStore(settings.elasticsearch)
    try:
        assert evaluate_pending(settings.alerts, store, execution_id) == 1
    finally:
        store.close()
    assert _messages(before["id"]) == [("netmap.change.new", "192.0.2.1", 22)]
    assert _messages(after["id"]) == []


def test_a_store_outage_after_the_commit_leaves_the_rules_to_the_job(es, receiver, caplog) -> None:
    settings, api = es
    alice, scanner = api.user(), api.scanner()
    rule = _rule(alice, _hook(alice, receiver), ["new"], query="port:22").get_json()["rule"]
    _scan(alice, scanner, [observation("192.0.2.1", 22)])
    down = settings.replace(
        elasticsearch={"url": "http://127.0.0.1:9", "request_timeout_seconds": 2.0}
    )
    unreachable = ElasticsearchStore(down.elasticsearch)
    try:
        with caplog.at_level(logging.INFO, logger="netmap.events"):
            _run_workers(settings, follow_up_store=unreachable)  # the analysis completes
    finally:
        unreachable.close()
    deferred = [
        r.netmap_fields
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "AlertSearchDeferred"
    ]
    assert len(deferred) == 1 and "StoreUnavailable" in deferred[0]["error"], deferred
    assert len(_pending()) == 1 and _messages(rule["id"]) == []
    store = ElasticsearchStore(settings.elasticsearch)
    try:
        assert evaluate_due(settings.alerts, store) == 1
    finally:
        store.close()
    assert _messages(rule["id"]) == [("netmap.change.new", "192.0.2.1", 22)]
    assert _pending() == []


def test_a_run_digest_waits_for_every_execution_pending_searched_rules(es, receiver) -> None:
    """A run of two executions: the first's search-filtered rules are left pending; the
    second is analysed and evaluated in full, the run is over, and still the digest waits
    until the job has evaluated the first."""
    settings, api = es
    alice, scanner = api.user(), api.scanner()
    channel = _hook(alice, receiver)
    digest = _digest_rule(alice, channel, "port:22")
    made = alice.post(
        "/api/tasks",
        json={"name": "two", "targets": ["192.0.2.0/24", "198.51.100.0/24"], "ports": "22,80"},
    )
    assert made.status_code == 201 and made.get_json()["task"]["execution_count"] == 2

    def finish_next() -> None:
        upload = claim(scanner)
        network = upload.execution["targets"][0].split("/")[0].rsplit(".", 1)[0]
        found = [observation(f"{network}.{n}", port) for n in (1, 2) for port in (22, 80)]
        assert upload.final(0, found).status_code == 200

    finish_next()
    _crashed_workers(settings)
    assert len(_pending()) == 1
    finish_next()
    _run_workers(settings)  # the second execution: evaluated in full, the run is over
    assert len(_pending()) == 1 and _digests(digest["id"]) == []
    assert send_finished_run_digests(settings) == 0

    store = ElasticsearchStore(settings.elasticsearch)
    try:
        assert evaluate_due(settings.alerts, store) == 1  # the digest, with the pending run
    finally:
        store.close()
    (data,) = _digests(digest["id"])
    assert data["change_sets"] == 2 and data["total"] == 4 and data["counts"]["new"] == 4
    assert sorted({c["port"] for c in data["changes"]}) == [22]
    assert _pending() == []


def test_two_processes_evaluating_the_same_pending_change_set_create_its_messages_once(
    es, receiver
) -> None:
    """The worker's step and the job racing on one pending execution: both ask the store,
    the run's lock makes them take turns, and only the one that deletes the row writes."""
    settings, api = es
    alice, scanner = api.user(), api.scanner()
    rule = _rule(alice, _hook(alice, receiver), ["new"], query="port:22").get_json()["rule"]
    _scan(alice, scanner, [observation(f"192.0.2.{n}", 22) for n in (1, 2, 3)])
    _crashed_workers(settings)
    (execution_id,) = _pending()

    results: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def evaluate() -> None:
        store = ElasticsearchStore(settings.elasticsearch)
        try:
            start.wait()
            results.append(evaluate_pending(settings.alerts, store, execution_id))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=evaluate) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and sorted(results) == [0, 3], (errors, results)
    assert [ip for _, ip, _ in _messages(rule["id"])] == ["192.0.2.1", "192.0.2.2", "192.0.2.3"]
    assert _pending() == []
