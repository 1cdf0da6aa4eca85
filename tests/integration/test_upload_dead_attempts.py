"""A batch of a dead attempt never counts (ING-18), on both store adapters.

Attempt 1 writes a batch to the store and its lease expires before the confirm
(the lease is expired in the database between the store write and the confirm,
and the execution is requeued as the recovery job does). Attempt 2 claims the
execution and finishes it. The dead batch saw one endpoint only it saw and, more
recently, one endpoint attempt 1's confirmed batch also saw: the execution's
counts, its results and the published assets hold neither its endpoint nor its
newer view of the shared one, while attempt 1's confirmed batch still counts
(tests/integration/test_upload_final_scope.py says why it must).
"""

from __future__ import annotations

import uuid
from typing import Any, NamedTuple

import pytest
import sqlalchemy as sa

from app import close_app, create_app
from app.db import transaction
from tests.support.api import Api
from tests.support.es_simulator import EsSimulator
from tests.support.scanner_protocol import claim, make_task, now_iso, observation
from tests.support.settings import make_settings
from tests.support.sql import rows
from tests.support.stores import install


@pytest.fixture(scope="module")
def simulator():
    with EsSimulator() as sim:
        yield sim


@pytest.fixture(params=["postgres", "elasticsearch"])
def store_api(request, database_url, tmp_path, engine):
    sections: dict = {"ingest": {"observed_at_max_age_days": 120}}
    if request.param == "elasticsearch":
        simulator = request.getfixturevalue("simulator")
        sections["elasticsearch"] = {
            "url": simulator.url,
            "index_prefix": f"dead-{uuid.uuid4().hex[:8]}",
            "request_timeout_seconds": 5.0,
            "bulk_retry_backoff_ms": 10,
            "bulk_retry_budget": 2,
        }
    settings = make_settings(database_url, tmp_path, **sections)
    app = create_app(settings, engine=engine, modules="off")
    yield Api(app), settings
    close_app(app)


def _expire_and_requeue() -> None:
    from app.scan_control.dispatch import recover_expired_leases

    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_executions SET lease_expires_at = now() - interval '1s'"))
        assert recover_expired_leases(conn, retry_backoff_seconds=0).requeued == 1


# Attempt 1's confirmed view of the endpoint its dead batch also sees.
_CONFIRMED = observation("192.0.2.1", 443, service={"name": "https", "product": "confirmed"})


class Scene(NamedTuple):
    """Attempt 1 has claimed the execution and confirmed batch 0 (``_CONFIRMED``)."""

    settings: Any
    user: Any
    scanner: Any
    task: dict
    first: Any
    store: Any


@pytest.fixture
def scene(store_api) -> Scene:
    api, settings = store_api
    user, scanner = api.user(), api.scanner()
    task = make_task(user)
    first = claim(scanner)
    store = install(api.app)
    confirmed = first.batch(0, [_CONFIRMED])
    assert confirmed.status_code == 200, confirmed.get_json()
    return Scene(settings, user, scanner, task, first, store)


def _dead_batch() -> list[dict]:
    """Newer than the confirmed view of 192.0.2.1:443, plus an endpoint only it saw."""
    return [
        observation(
            "192.0.2.1",
            443,
            observed_at=now_iso(-30),
            service={"name": "https", "product": "dead-attempt"},
        ),
        observation("192.0.2.9", 22, observed_at=now_iso(-30)),
    ]


def _execution_counts() -> tuple:
    (row,) = rows("SELECT status, observation_count, endpoint_count, ip_count FROM scan_executions")
    return tuple(row)


def _results(user, task_id: int) -> dict[tuple[str, int], dict]:
    body = user.get(f"/api/tasks/{task_id}/results").get_json()
    return {(item["ip"], item["port"]): item for item in body["items"]}


def _published(user, settings) -> dict[tuple[str, int], dict]:
    from app.projection.slices import ProjectionWorker
    from app.search import open_store
    from tests.support.projection import drain

    store = open_store(settings)
    try:
        drain(ProjectionWorker(settings, store))
    finally:
        store.close()
    items = user.get("/api/assets").get_json()["items"]
    return {(item["ip"], item["port"]): item for item in items}


def _assert_only_confirmed(user, settings, task_id: int, execution_id: int) -> None:
    # Confirmed: attempt 1's batch 0 (192.0.2.1:443), attempt 2's 192.0.2.2 and 192.0.2.3.
    assert _execution_counts() == ("succeeded", 3, 3, 3)
    expected = {("192.0.2.1", 443), ("192.0.2.2", 443), ("192.0.2.3", 443)}
    results = _results(user, task_id)
    assert set(results) == expected
    assert results[("192.0.2.1", 443)]["product"] == "confirmed"
    published = _published(user, settings)
    assert set(published) == expected
    assert published[("192.0.2.1", 443)]["product"] == "confirmed"
    assert published[("192.0.2.1", 443)]["last_execution_id"] == execution_id


def test_a_batch_whose_lease_expired_before_its_confirm_is_not_counted(scene):
    settings, user, scanner, task, first, store = scene

    # Between the dead batch's store writes and its confirm, the lease expires.
    store.after["write_execution_endpoints"] = lambda *_a, **_k: _expire_and_requeue()
    dead = first.batch(1, _dead_batch())
    del store.after["write_execution_endpoints"]
    assert dead.status_code == 409 and dead.get_json()["error"]["code"] == "lease_lost"

    second = claim(scanner)
    assert second.id == first.id and second.token != first.token
    other = second.batch(0, [observation("192.0.2.2", 443)], upload_id="attempt-2")
    assert other.status_code == 200, other.get_json()
    final = second.final(1, [observation("192.0.2.3", 443)], upload_id="attempt-2")
    assert final.status_code == 200, final.get_json()

    _assert_only_confirmed(user, settings, task["id"], first.id)
    names = store.names()
    # Removed before the count: read, endpoints rebuilt, facts deleted last.
    assert names.index("batch_facts") < names.index("delete_facts") < names.index("count")


def test_a_dead_write_landing_after_the_final_removes_itself(scene):
    """The dead request's store write is still under way while attempt 2 finishes the
    execution; its confirm then gets lease_lost and it removes what it wrote."""
    settings, user, scanner, task, first, store = scene
    finished = []

    def attempt_2_finishes_first(*_a, **_k) -> None:
        del store.before["write_facts"]  # attempt 2's own writes go straight through
        _expire_and_requeue()
        second = claim(scanner)
        assert second.batch(0, [observation("192.0.2.2", 443)], upload_id="a2").status_code == 200
        final = second.final(1, [observation("192.0.2.3", 443)], upload_id="a2")
        finished.append(final.status_code)

    store.before["write_facts"] = attempt_2_finishes_first
    dead = first.batch(1, _dead_batch())
    assert finished == [200]
    assert dead.status_code == 409 and dead.get_json()["error"]["code"] == "lease_lost"

    _assert_only_confirmed(user, settings, task["id"], first.id)


def test_a_dead_write_landing_between_purge_and_count_is_counted_out(scene):
    """The final's purge ran, then the dead request's write landed before the count:
    the final finds it after counting, removes it and counts again."""
    from app.result_ingest.enrichment import (
        UploadContext,
        apply_tags,
        endpoint_documents,
        fact_documents,
        normalise_observation,
    )
    from app.result_ingest.parse import parse_upload

    settings, user, scanner, task, first, store = scene

    # The dead batch is reserved (its receipt pending) but its write has not landed yet.
    def lease_expires_before_the_write(*_a, **_k):
        _expire_and_requeue()
        raise_now = store.before.pop("write_facts")
        assert raise_now is lease_expires_before_the_write
        from app.search.port import StoreUnavailable

        raise StoreUnavailable("the request of the dead attempt is still under way")

    store.before["write_facts"] = lease_expires_before_the_write
    dead_body_sent = first.batch(1, _dead_batch())
    assert dead_body_sent.status_code == 503
    dead_body = first.sent[-1]

    def dead_write_lands(*_a, **_k) -> None:
        del store.before["count"]
        body = parse_upload(dead_body, settings.ingest)
        context = UploadContext(
            execution_id=first.id,
            task_id=task["id"],
            owner_id=_owner(first.id),
            scanner_id=None,
            upload_id=body.upload_id,
            stream=body.stream,
            batch_index=body.batch_index,
        )
        values = [apply_tags(normalise_observation(o)) for o in body.observations]
        store.inner.write_facts(fact_documents(context, body, values)).raise_for_failures()
        docs = endpoint_documents(context, values, (o.observed_at for o in body.observations))
        store.inner.write_execution_endpoints(docs).raise_for_failures()

    second = claim(scanner)
    assert second.batch(0, [observation("192.0.2.2", 443)], upload_id="a2").status_code == 200
    store.before["count"] = dead_write_lands
    final = second.final(1, [observation("192.0.2.3", 443)], upload_id="a2")
    assert final.status_code == 200, final.get_json()
    assert store.names().count("count") == 2  # counted again after the late write

    _assert_only_confirmed(user, settings, task["id"], first.id)


def _owner(execution_id: int) -> int:
    (row,) = rows(
        "SELECT t.owner_id FROM scan_executions x JOIN scan_tasks t ON t.id = x.task_id "
        "WHERE x.id = :e",
        e=execution_id,
    )
    return row[0]


def test_a_dead_batch_cannot_be_taken_over_once_the_final_is_reserved(scene):
    """The retry of a dead batch under the new claim would complete it (ING-18's retry
    rule), but not while that claim's final runs: the final counts without the batch
    and removes what the dead attempt wrote of it."""
    settings, user, scanner, task, first, store = scene
    store.after["write_execution_endpoints"] = lambda *_a, **_k: _expire_and_requeue()
    assert first.batch(1, _dead_batch()).status_code == 409
    del store.after["write_execution_endpoints"]
    dead_body = first.sent[-1]
    second = claim(scanner)
    assert second.batch(0, [observation("192.0.2.2", 443)], upload_id="a2").status_code == 200
    taken_over = []

    def retry_the_dead_batch_meanwhile(*_a, **_k) -> None:
        del store.before["write_facts"]
        taken_over.append(second.post({**dead_body, "claim_token": second.token}))

    store.before["write_facts"] = retry_the_dead_batch_meanwhile
    final = second.final(1, [observation("192.0.2.3", 443)], upload_id="a2")
    assert final.status_code == 200, final.get_json()
    (refused,) = taken_over
    assert refused.status_code == 409, refused.get_json()
    assert refused.get_json()["error"]["code"] == "final_already_reserved"

    _assert_only_confirmed(user, settings, task["id"], first.id)


def test_a_dead_request_that_cannot_remove_its_write_still_answers_lease_lost(scene, caplog):
    from app.search.port import StoreUnavailable

    scanner, first, store = scene.scanner, scene.first, scene.store

    def attempt_2_finishes_first(*_a, **_k) -> None:
        del store.before["write_facts"]
        _expire_and_requeue()
        second = claim(scanner)
        assert second.final(0, [observation("192.0.2.3", 443)], upload_id="a2").status_code == 200

        def store_down(*_a, **_k):
            raise StoreUnavailable("cluster unreachable")

        store.before["batch_facts"] = store_down  # the dead request's removal fails

    store.before["write_facts"] = attempt_2_finishes_first
    dead = first.batch(1, _dead_batch())
    assert dead.status_code == 409 and dead.get_json()["error"]["code"] == "lease_lost"
    assert any(
        getattr(r, "netmap_event", None) == "ScanUnconfirmedBatchPurgeFailed"
        for r in caplog.records
    )


def test_a_final_whose_lease_expired_before_its_commit_is_not_counted(scene):
    """Attempt 1's final stored its batch, then its lease expired before the commit: the
    final of attempt 2 counts without it."""
    settings, user, scanner, task, first, store = scene

    def lease_expires(*_a, **_k) -> None:
        del store.before["count"]
        _expire_and_requeue()

    store.before["count"] = lease_expires
    dead_final = first.final(1, _dead_batch())
    # Requeued, the execution is no longer this scanner's: not found (or lease_lost).
    assert dead_final.status_code in (404, 409), dead_final.get_json()

    second = claim(scanner)
    assert second.batch(0, [observation("192.0.2.2", 443)], upload_id="a2").status_code == 200
    final = second.final(1, [observation("192.0.2.3", 443)], upload_id="a2")
    assert final.status_code == 200, final.get_json()

    _assert_only_confirmed(user, settings, task["id"], first.id)
