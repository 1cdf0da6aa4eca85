"""`netmap search migrate --to elasticsearch` (ING-11): a PostgreSQL store's history
copied into Elasticsearch (the protocol simulator, or a real cluster with
NETMAP_TEST_ES_URL): bounded pages, resumable after an interruption, counts checked
at the end, and the final-scope rule for migrated history."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from app.db import transaction
from app.search.elasticsearch_store import ElasticsearchStore
from app.search.migrate import LEGACY, migrate_to_elasticsearch
from app.search.postgres_store import PostgresStore
from tests.support.scanner_protocol import claim, make_task, observation


class Interrupted(Exception):
    pass


def _history(api):
    """Two executions with facts and endpoints in the PostgreSQL store."""
    user, scanner = api.user(), api.scanner()
    ids = []
    for net in ("192.0.2.0/29", "198.51.100.0/29"):
        make_task(user, targets=(net,), ports="22,80")
        upload = claim(scanner)
        base = net.rsplit(".", 1)[0]
        assert (
            upload.batch(
                0, [observation(f"{base}.1", 22), observation(f"{base}.2", 80)]
            ).status_code
            == 200
        )
        assert upload.final(1, [observation(f"{base}.3", 22)]).status_code == 200
        ids.append(upload.id)
    return ids


def _state():
    with transaction() as conn:
        return conn.execute(sa.text("SELECT * FROM search_store_migrations")).one()


def test_migrate_copies_the_history_resumes_and_checks_counts(api, settings, es_settings):
    executions = _history(api)
    source = PostgresStore(settings)
    target = ElasticsearchStore(es_settings)
    messages: list[str] = []

    def interrupt_after_two_fact_pages(message: str) -> None:
        messages.append(message)
        if message.startswith("facts:") and len(messages) == 2:
            raise Interrupted

    with pytest.raises(Interrupted):
        migrate_to_elasticsearch(
            source, target, batch_size=2, progress=interrupt_after_two_fact_pages
        )
    state = _state()
    assert (state.phase, state.facts_copied, state.finished_at) == ("facts", 4, None)

    resumed = migrate_to_elasticsearch(source, target, batch_size=2, progress=messages.append)
    assert resumed.resumed and not resumed.mismatches
    assert resumed.facts == 6 and resumed.endpoints == 6
    assert resumed.executions_checked == 2
    state = _state()
    assert state.phase == "done" and state.finished_at is not None
    # Bounded pages: never more than batch_size facts per page.
    assert [m for m in messages if m.startswith("facts:")] == [
        "facts: 2 copied",
        "facts: 4 copied",
        "facts: 6 copied",
    ]
    target.refresh(LEGACY)
    for execution_id in executions:
        assert target.count(LEGACY, execution_id) == source.count(LEGACY, execution_id)
    # The projection builds the cluster's current view from the copied endpoints.
    with transaction() as conn:
        assert conn.execute(
            sa.text("SELECT count(*) FROM scan_projection_outbox WHERE processed_at IS NULL")
        ).scalar_one() == len(executions)
    target.close()
    source.close()


def test_a_count_difference_fails_and_leaves_the_migration_unfinished(api, settings, es_settings):
    _history(api)
    source = PostgresStore(settings)
    target = ElasticsearchStore(es_settings)
    real_write = target.write_facts

    def drop_one(facts):  # a fact that never reaches the cluster
        return real_write(list(facts)[1:])

    target.write_facts = drop_one  # type: ignore[method-assign]
    result = migrate_to_elasticsearch(source, target, batch_size=100)
    assert result.mismatches and not result.as_dict()["ok"]
    assert _state().finished_at is None
    target.write_facts = real_write  # type: ignore[method-assign]
    again = migrate_to_elasticsearch(source, target, batch_size=100, restart=True)
    assert not again.mismatches and _state().finished_at is not None
    target.close()
    source.close()


def test_a_final_after_the_migration_reads_the_whole_history(api, settings, es_settings, caplog):
    user, scanner = api.user(), api.scanner()
    make_task(user, targets=("192.0.2.0/29",), ports="22")
    upload = claim(scanner)
    assert upload.batch(0, [observation("192.0.2.1", 22)]).status_code == 200
    source, target = PostgresStore(settings), ElasticsearchStore(es_settings)
    assert not migrate_to_elasticsearch(source, target, batch_size=10).mismatches
    target.close()
    source.close()
    with caplog.at_level(logging.INFO, logger="netmap.events"):
        assert upload.final(1, [observation("192.0.2.2", 22)]).status_code == 200
    legacy = [
        r.netmap_fields
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "ScanSummaryLegacyIndexScope"
    ]
    assert [f["reason"] for f in legacy] == [
        "confirmed receipts stored before the history was migrated"
    ]
    plans = [
        r.netmap_fields
        for r in caplog.records
        if getattr(r, "netmap_event", "") == "ScanFinalRequestPlan"
    ]
    assert plans[-1]["legacy_full_history"] is True


def test_the_command_reports_progress_on_stderr_and_a_summary(
    api, settings, es_settings, database_url, tmp_path
):
    _history(api)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETMAP_")}
    env.update(
        NETMAP_DATABASE_URL=database_url,
        NETMAP_DATA_DIR=str(tmp_path),
        NETMAP_ELASTICSEARCH_INDEX_PREFIX=es_settings.index_prefix,
        NETMAP_ELASTICSEARCH_REQUEST_TIMEOUT_SECONDS="5",
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "app",
            "search",
            "migrate",
            "--to",
            "elasticsearch",
            "--es-url",
            es_settings.url,
            "--batch-size",
            "4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["ok"] and summary["facts"] == 6 and summary["endpoints"] == 6
    assert "migrate: facts: 4 copied" in done.stderr
    assert "migrate: done" in done.stderr
