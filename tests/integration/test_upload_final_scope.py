"""The final's index scope (ING-8): why it is every confirmed receipt of the execution.

A narrower scope — this upload's confirmed receipts plus the final batch's
months — would leave out facts the execution stored and may show: those of
another upload id of the same claim (a scanner may deliver one attempt under
several upload ids; ING-18 makes the final wait for them, so their batches are
part of what the final finishes) and those a previous attempt confirmed before
its lease expired (they are the execution's facts in the store, keyed by its
id). Each test sends the other upload's batch in another month than the
final's, so only the wider scope counts it: refresh and count run over months,
and a month left out is a fact left out.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.search.documents import month_of
from tests.support.scanner_protocol import claim, make_task, observation
from tests.support.settings import make_settings
from tests.support.sql import rows
from tests.support.stores import install

EARLIER = datetime.now(UTC) - timedelta(days=62)  # always another month than now


@pytest.fixture
def settings(database_url, tmp_path):
    return make_settings(database_url, tmp_path, ingest={"observed_at_max_age_days": 120})


def _earlier_observation(ip: str):
    return observation(ip, observed_at=EARLIER.isoformat().replace("+00:00", "Z"))


def _counted(store) -> list[tuple[str, ...]]:
    return [args[0].months for name, args, _ in store.calls if name == "count"]


def _execution_counts():
    (row,) = rows("SELECT status, observation_count, endpoint_count, ip_count FROM scan_executions")
    return tuple(row)


def test_the_final_counts_what_another_upload_id_of_the_claim_confirmed(api):
    user, scanner = api.user(), api.scanner()
    make_task(user)
    upload = claim(scanner)
    store = install(api.app)
    other = upload.batch(0, [_earlier_observation("192.0.2.1")], upload_id="upload-a")
    assert other.status_code == 200, other.get_json()
    final = upload.final(0, [observation("192.0.2.2")], upload_id="upload-b")
    assert final.status_code == 200, final.get_json()

    assert _execution_counts() == ("succeeded", 2, 2, 2)
    now = month_of(datetime.now(UTC))
    assert _counted(store) == [tuple(sorted({month_of(EARLIER), now}))]


def test_the_final_counts_what_a_previous_attempt_confirmed(api):
    from app.scan_control.dispatch import recover_expired_leases

    user, scanner = api.user(), api.scanner()
    task = make_task(user)
    first = claim(scanner)
    store = install(api.app)
    assert first.batch(0, [_earlier_observation("192.0.2.1")]).status_code == 200
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_executions SET lease_expires_at = now() - interval '1s'"))
        assert recover_expired_leases(conn, retry_backoff_seconds=0).requeued == 1
    second = claim(scanner)
    assert second.id == first.id and second.token != first.token
    final = second.final(0, [observation("192.0.2.2")], upload_id="attempt-2")
    assert final.status_code == 200, final.get_json()

    # What the execution counted is what its results show: both attempts' endpoints.
    assert _execution_counts() == ("succeeded", 2, 2, 2)
    assert month_of(EARLIER) in _counted(store)[0]
    results = user.get(f"/api/tasks/{task['id']}/results").get_json()
    assert sorted(item["ip"] for item in results["items"]) == ["192.0.2.1", "192.0.2.2"]
