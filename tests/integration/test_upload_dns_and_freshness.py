"""DNS executions, the DNS sidecar, follow-up tasks and target freshness (ING-7, ING-12, SCN-2)."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from tests.support.scanner_protocol import claim, dns_record, now_iso, observation


def targets_of(owner_id: int):
    with transaction() as conn:
        return {
            (r.kind, r.key): r.last_scanned_at
            for r in conn.execute(
                sa.text(
                    "SELECT kind, key, last_scanned_at FROM search_targets WHERE owner_id = :o"
                ),
                {"o": owner_id},
            )
        }


def test_dns_execution_creates_a_follow_up_task_and_the_parent_waits(api):
    user, scanner = api.user(), api.scanner()
    parent = user.post(
        "/api/tasks", json={"name": "site", "targets": ["example.com"], "ports": "80,443"}
    ).get_json()["task"]
    dns = claim(scanner)
    assert dns.execution["kind"] == "dns"
    records = [
        dns_record("example.com", "192.0.2.10"),
        dns_record("example.com", "2001:db8::10", type="AAAA"),
        dns_record("www.example.com", "example.com", type="CNAME"),
        dns_record("example.com", "192.0.2.10"),
    ]
    assert dns.batch(0, [], dns_records=records[:2]).get_json()["saved"] == 2
    final = dns.final(1, [], dns_records=records[2:])
    assert final.status_code == 200, final.get_json()
    detail = user.get(f"/api/tasks/{parent['id']}").get_json()["task"]
    assert detail["status"] == "running"
    assert detail["projection_status"] == "not_applicable"
    assert len(detail["child_task_ids"]) == 1
    child_id = detail["child_task_ids"][0]
    child = user.get(f"/api/tasks/{child_id}").get_json()["task"]
    assert child["parent_task_id"] == parent["id"]
    assert child["targets"] == ["192.0.2.10", "2001:db8::10"]
    assert child["ports"] == "80,443"
    executions = user.get(f"/api/tasks/{parent['id']}/executions").get_json()["items"]
    assert executions[0]["projection_status"] == "not_applicable"
    assert executions[0]["status"] == "succeeded"
    assert executions[0]["observation_count"] == 4
    with transaction() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM scan_projection_outbox")).scalar() == 0
    # The domain is not fresh until the follow-up succeeded.
    assert targets_of(user.id)[("domain", "example.com")] is None
    follow_up = claim(scanner)
    assert follow_up.execution["task_id"] == child_id
    assert follow_up.final(0, [observation("192.0.2.10", 443)]).status_code == 200
    assert user.get(f"/api/tasks/{parent['id']}").get_json()["task"]["status"] == "succeeded"
    assert targets_of(user.id)[("domain", "example.com")] is not None
    # Resolved addresses are not registered as targets the owner entered.
    assert ("ip", "192.0.2.10") not in targets_of(user.id)


def test_dns_execution_without_answers_has_no_follow_up(api):
    user, scanner = api.user(), api.scanner()
    parent = user.post(
        "/api/tasks", json={"name": "nx", "targets": ["nothing.example"], "ports": "80"}
    ).get_json()["task"]
    dns = claim(scanner)
    assert (
        dns.final(
            0, [], dns_records=[dns_record("nothing.example", "x.example", type="CNAME")]
        ).status_code
        == 200
    )
    detail = user.get(f"/api/tasks/{parent['id']}").get_json()["task"]
    assert detail["status"] == "succeeded" and detail["child_task_ids"] == []
    assert targets_of(user.id)[("domain", "nothing.example")] is not None


def test_dns_sidecar_batches_are_sparse_inside_the_confirmed_range(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.1"], "ports": "80-82"})
    upload = claim(scanner)
    sidecar = [dns_record("host.example", "192.0.2.1", type="A")]
    early = upload.batch(0, [], dns_records=sidecar, stream="dns")
    assert early.status_code == 409 and early.get_json()["error"]["code"] == "batch_gap"
    for index in range(3):
        assert upload.batch(index, [observation("192.0.2.1", 80 + index)]).status_code == 200
    assert upload.batch(2, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    assert upload.batch(0, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    beyond = upload.batch(5, [], dns_records=sidecar, stream="dns")
    assert beyond.status_code == 409
    final_sidecar = upload.batch(1, [], dns_records=sidecar, stream="dns", is_final=True)
    assert final_sidecar.status_code == 400
    assert upload.final(3, []).status_code == 200
    late = upload.batch(1, [], dns_records=sidecar, stream="dns")
    assert late.status_code in (409,)


def _pending_main_batch(api, upload, index: int, ip: str) -> None:
    """Main batch ``index`` stays pending: its store write fails after the receipt."""
    from app.search.port import StoreUnavailable
    from tests.support.stores import install

    store = install(api.app)

    def unavailable(*_a, **_k):
        raise StoreUnavailable("cluster unreachable")

    store.before["write_facts"] = unavailable
    assert upload.batch(index, [observation(ip, 80)]).status_code == 503
    del store.before["write_facts"]


def test_a_sidecar_batch_inside_the_confirmed_range_is_accepted_while_later_main_batches_pend(
    api,
):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.0/29"], "ports": "80"})
    upload = claim(scanner)
    sidecar = [dns_record("host.example", "192.0.2.1", type="A")]
    for index in range(2):
        assert upload.batch(index, [observation(f"192.0.2.{index + 1}", 80)]).status_code == 200
    _pending_main_batch(api, upload, 2, "192.0.2.3")
    retry_of_2 = upload.sent[-1]
    assert upload.batch(3, [observation("192.0.2.4", 80)]).status_code == 200

    # 0 and 1 are confirmed and contiguous: their sidecar batches are accepted now.
    assert upload.batch(1, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    assert upload.batch(0, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    # 2 is pending (and 3, though confirmed, lies beyond it): refused, the range named.
    for index in (2, 3):
        refused = upload.batch(index, [], dns_records=sidecar, stream="dns")
        assert refused.status_code == 409
        error = refused.get_json()["error"]
        assert error["code"] == "batch_gap"
        assert error["details"]["confirmed_range"] == [0, 1]
        assert error["details"]["main_pending"] == 1

    assert upload.post(retry_of_2).get_json()["saved"] == 1
    assert upload.batch(3, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    assert upload.final(4, []).status_code == 200


def test_a_sidecar_batch_waits_while_main_batch_0_is_pending_or_main_has_a_gap(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.0/29"], "ports": "80"})
    upload = claim(scanner)
    sidecar = [dns_record("host.example", "192.0.2.1", type="A")]
    _pending_main_batch(api, upload, 0, "192.0.2.1")
    early = upload.batch(0, [], dns_records=sidecar, stream="dns")
    assert early.status_code == 409
    assert early.get_json()["error"]["details"]["confirmed_range"] is None

    user.post("/api/tasks", json={"name": "t", "targets": ["192.0.2.8/29"], "ports": "80"})
    other = claim(scanner)  # another execution: main batch 1 before 0 leaves a gap
    assert other.batch(1, [observation("192.0.2.9", 80)]).status_code == 200
    other_sidecar = [dns_record("other.example", "192.0.2.9", type="A")]
    gap = other.batch(0, [], dns_records=other_sidecar, stream="dns")
    assert gap.status_code == 409 and gap.get_json()["error"]["code"] == "batch_gap"


def test_a_sidecar_batch_inside_the_confirmed_prefix_is_accepted_across_a_main_gap(api):
    """ING-7: 0..1 confirmed, 2 not yet sent, 3 confirmed: a sidecar at 0 or 1 is
    accepted; at 2 or 3 (beyond the gap) it is refused until 2 arrives."""
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.0/29"], "ports": "80"})
    upload = claim(scanner)
    sidecar = [dns_record("host.example", "192.0.2.1", type="A")]
    for index in (0, 1, 3):
        assert upload.batch(index, [observation(f"192.0.2.{index + 1}", 80)]).status_code == 200

    assert upload.batch(1, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    assert upload.batch(0, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    for index in (2, 3):
        refused = upload.batch(index, [], dns_records=sidecar, stream="dns")
        assert refused.status_code == 409
        assert refused.get_json()["error"]["code"] == "batch_gap"

    assert upload.batch(2, [observation("192.0.2.3", 80)]).status_code == 200
    assert upload.batch(3, [], dns_records=sidecar, stream="dns").get_json()["saved"] == 1
    assert upload.final(4, []).status_code == 200
    with transaction() as conn:
        sidecars = (
            conn.execute(
                sa.text(
                    "SELECT batch_index FROM scan_upload_receipts WHERE execution_id = :e "
                    "AND stream = 'dns' AND status = 'confirmed' ORDER BY batch_index"
                ),
                {"e": upload.id},
            )
            .scalars()
            .all()
        )
    assert sidecars == [0, 1, 3]


def test_the_sidecar_prefix_count_is_a_primary_key_range(api):
    """Across a gap the prefix is counted through the primary key, bounded by the index."""
    from app.result_ingest import receipts

    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.1"], "ports": "80"})
    upload = claim(scanner)
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, "
                "checksum, observation_count, status, storage_references) "
                "SELECT :e, 'upload-1', 'main', i, md5(i::text), 1, 'confirmed', '{}' "
                "FROM generate_series(0, 19999) i WHERE i <> 10; ANALYZE scan_upload_receipts"
            ),
            {"e": upload.id},
        )
        params = {"e": upload.id, "u": "upload-1", "i": 5}
        plan = "\n".join(
            conn.execute(sa.text(f"EXPLAIN {receipts.CONFIRMED_MAIN_PREFIX}"), params).scalars()
        )
        assert receipts.prefix_confirmed(conn, upload.id, "upload-1", 9)
        assert not receipts.prefix_confirmed(conn, upload.id, "upload-1", 10)
    assert "scan_upload_receipts_pkey" in plan, plan


def test_the_sidecar_range_reads_the_open_receipts_index(api):
    """The lowest pending main batch comes from the partial index, not the upload's history."""
    from app.result_ingest import receipts

    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "s", "targets": ["192.0.2.1"], "ports": "80"})
    upload = claim(scanner)
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO scan_upload_receipts (execution_id, upload_id, stream, batch_index, "
                "checksum, observation_count, status, storage_references) "
                "SELECT :e, 'upload-1', 'main', i, md5(i::text), 1, 'confirmed', '{}' "
                "FROM generate_series(0, 19999) i; ANALYZE scan_upload_receipts"
            ),
            {"e": upload.id},
        )
        plan = "\n".join(
            conn.execute(
                sa.text(f"EXPLAIN {receipts.PENDING_MAIN_BATCHES}"),
                {"e": upload.id, "u": "upload-1"},
            ).scalars()
        )
    assert "ix_scan_upload_receipts_open" in plan, plan


def test_cidr_and_single_address_freshness(api):
    user, scanner = api.user(), api.scanner()
    other = api.user()
    # Targets entered earlier, by the owner and by someone else.
    user.post(
        "/api/tasks",
        json={
            "name": "a",
            "targets": ["192.0.2.0/25", "192.0.2.7", "2001:db8::/126"],
            "ports": "80",
        },
    )
    other.post("/api/tasks", json={"name": "b", "targets": ["192.0.2.0/25"], "ports": "80"})
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_executions SET status = 'failed'"))
    user.post("/api/tasks", json={"name": "c", "targets": ["192.0.2.0/24"], "ports": "80"})
    upload = claim(scanner)
    assert upload.execution["targets"] == ["192.0.2.0/24"]
    assert upload.final(0, [observation("192.0.2.7", 80)]).status_code == 200
    mine = targets_of(user.id)
    assert mine[("cidr", "192.0.2.0/25")] is not None
    assert mine[("ip", "192.0.2.7")] is not None
    assert mine[("cidr", "192.0.2.0/24")] is not None
    assert mine[("cidr", "2001:db8::/126")] is None  # IPv6 never matches an IPv4 scan
    assert targets_of(other.id)[("cidr", "192.0.2.0/25")] is None  # same owner only


def test_an_older_execution_never_overwrites_a_newer_time(api):
    user, scanner = api.user(), api.scanner()
    user.post("/api/tasks", json={"name": "old", "targets": ["192.0.2.9"], "ports": "80"})
    user.post("/api/tasks", json={"name": "new", "targets": ["192.0.2.9"], "ports": "80"})
    older = claim(scanner)
    newer = claim(scanner)
    with transaction() as conn:
        conn.execute(
            sa.text(
                "UPDATE scan_executions SET started_at = now() - interval '1 hour' WHERE id = :id"
            ),
            {"id": older.id},
        )
    assert newer.final(0, []).status_code == 200
    fresh = targets_of(user.id)[("ip", "192.0.2.9")]
    assert fresh is not None
    assert older.final(0, []).status_code == 200
    assert targets_of(user.id)[("ip", "192.0.2.9")] == fresh


def test_cidr_freshness_uses_the_gist_index(api):
    from app.scan_control import freshness

    user = api.user()
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO search_targets (owner_id, kind, key) "
                "SELECT :o, 'cidr', format('10.%s.%s.0/24', a, b) "
                "FROM generate_series(0, 99) a, generate_series(0, 99) b; ANALYZE search_targets"
            ),
            {"o": user.id},
        )
        sql = f"EXPLAIN {freshness.CIDR_TARGETS_INSIDE}"
        plan = "\n".join(
            conn.execute(
                sa.text(sql),
                {"owner": user.id, "execution": 1, "at": now_iso(), "net": "10.5.0.0/16"},
            ).scalars()
        )
    assert "ix_search_targets_cidr_gist" in plan


def test_single_address_freshness_inside_a_network_uses_the_primary_key(api):
    """ING-12: single-IP targets inside a scanned network are found by
    the primary key — listed keys for a small network, the owner's (owner, 'ip')
    prefix for a larger one — never a sequential scan of everyone's targets."""
    from app.scan_control import freshness

    user = api.user()
    with transaction() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO users (username, password_hash) "
                "SELECT 'bulk' || i, 'x' FROM generate_series(1, 200) i"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO search_targets (owner_id, kind, key) "
                "SELECT u.id, 'ip', format('10.%s.%s.%s', a, b, u.id % 250) "
                "FROM users u, generate_series(0, 9) a, generate_series(0, 49) b; "
                "ANALYZE search_targets"
            )
        )
        params = {"owner": user.id, "execution": 1, "at": now_iso()}
        plans = {}
        for name, sql, extra in (
            ("keys", freshness.IP_TARGETS_BY_KEY, {"keys": ["10.1.1.1", "10.1.1.2"]}),
            ("prefix", freshness.IP_TARGETS_INSIDE, {"net": "10.1.0.0/16"}),
        ):
            plans[name] = "\n".join(
                conn.execute(sa.text(f"EXPLAIN {sql}"), {**params, **extra}).scalars()
            )
    for name, plan in plans.items():
        assert "search_targets_pkey" in plan, (name, plan)
        assert "Seq Scan" not in plan, (name, plan)
    assert "key = ANY" in plans["keys"], plans["keys"]


def test_single_addresses_inside_small_and_large_networks_become_fresh(api):
    from datetime import UTC, datetime

    from app.scan_control import freshness

    user, scanner = api.user(), api.scanner()
    user.post(
        "/api/tasks",
        json={"name": "a", "targets": ["10.9.0.7", "10.9.200.9", "2001:db8::5"], "ports": "80"},
    )
    with transaction() as conn:
        conn.execute(sa.text("UPDATE scan_executions SET status = 'failed'"))
    user.post("/api/tasks", json={"name": "b", "targets": ["10.9.0.0/24"], "ports": "80"})
    user.post("/api/tasks", json={"name": "c", "targets": ["2001:db8::/120"], "ports": "80"})
    for _ in range(2):
        assert claim(scanner).final(0, []).status_code == 200
    mine = targets_of(user.id)
    assert mine[("ip", "10.9.0.7")] is not None  # listed keys (a /24)
    assert mine[("ip", "2001:db8::5")] is not None  # IPv6 keys in their compressed form
    assert mine[("ip", "10.9.200.9")] is None
    # A piece larger than ENUMERATE_MAX_ADDRESSES (execution_max_addresses raised): the
    # owner's primary-key prefix, filtered by the network.
    with transaction() as conn:
        freshness.update_after_success(
            conn,
            execution_id=1,
            task_id=1,
            owner_id=user.id,
            kind="ports",
            targets=["10.9.128.0/17"],
            started_at=datetime.now(UTC),
            parent_task_id=None,
        )
    assert targets_of(user.id)[("ip", "10.9.200.9")] is not None
