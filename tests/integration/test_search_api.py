"""Task results (execution projection) and current-asset search over HTTP (SCN-5, STO-3)."""

from __future__ import annotations

import json

from app.cursors import encode_cursor
from app.projection.pages import current_asset_documents
from app.search.documents import merge_all
from tests.support.scanner_protocol import claim, observation


def _scan(user, scanner, targets, observations):
    created = user.post(
        "/api/tasks",
        json={"name": "r", "targets": targets, "ports": "1-65535", "transports": ["tcp", "udp"]},
    )
    task = created.get_json()["task"]
    upload = claim(scanner)
    assert upload.final(0, observations).status_code == 200
    return task, upload


def _publish(app, execution_id):
    """Publish one execution's endpoints as current assets, as the projection does."""
    from app.http import context

    with app.app_context():
        store = context.store()  # the app's own store, closed with the app
    docs = store.read_execution_endpoints(execution_id, after_id=None, limit=1000)
    store.publish_current(
        merge_all(current_asset_documents(docs)), max_operations=1000, max_bytes=5_000_000
    ).raise_for_failures()


def test_results_page_counts_endpoints_and_keeps_an_ip_together(api):
    user, scanner = api.user(), api.scanner()
    observations = [observation(f"192.0.2.{i}", port) for i in range(1, 6) for port in (22, 443)]
    observations.append(observation("192.0.2.1", 80))  # three ports on one address
    task, _ = _scan(user, scanner, ["192.0.2.0/28"], observations)
    first = user.get(f"/api/tasks/{task['id']}/results?limit=2").get_json()
    assert first["total_endpoints"] == 11 and first["total_ips"] == 5
    assert [(i["ip"], i["port"]) for i in first["items"]] == [("192.0.2.1", 22), ("192.0.2.1", 80)]
    seen = [(i["ip"], i["port"]) for i in first["items"]]
    cursor = first["next_cursor"]
    while cursor:
        page = user.get(f"/api/tasks/{task['id']}/results?limit=2&cursor={cursor}").get_json()
        assert "total_endpoints" not in page and page["total_ips"] == 5
        assert len(page["items"]) <= 2
        seen.extend((i["ip"], i["port"]) for i in page["items"])
        cursor = page["next_cursor"]
    # The third port of 192.0.2.1 opens the second page; nothing is lost or repeated and
    # each address's endpoints stay adjacent.
    assert seen[2] == ("192.0.2.1", 443)
    assert seen == sorted(seen, key=lambda s: (int(s[0].rsplit(".", 1)[1]), s[1]))
    assert sorted(seen) == sorted((o["ip"], o["port"]) for o in observations)
    assert api.user().get(f"/api/tasks/{task['id']}/results").status_code == 404
    assert user.get(f"/api/tasks/{task['id']}/results?cursor=bogus").status_code == 400


def test_a_results_cursor_of_the_earlier_format_is_a_clear_400(api):
    # Earlier cursors named the last address of a page of whole addresses, signed as
    # kind "results"; they are refused, not read as a position with another meaning.
    user, scanner = api.user(), api.scanner()
    task, _ = _scan(user, scanner, ["192.0.2.0/28"], [observation("192.0.2.1", 22)])
    with api.app.app_context():
        old = encode_cursor("results", {"after": "192.0.2.1", "ips": 1})
    answer = user.get(f"/api/tasks/{task['id']}/results?cursor={old}")
    assert answer.status_code == 400
    assert answer.get_json()["error"]["code"] == "invalid_cursor"


def test_asset_search_filters_and_ownership(api):
    alice, bob, admin, scanner = api.user(), api.user(), api.admin(), api.scanner()
    _, first = _scan(
        alice,
        scanner,
        ["192.0.2.0/28"],
        [
            observation(
                "192.0.2.1",
                22,
                service={"name": "ssh", "product": "OpenSSH", "banner": "SSH-2.0-OpenSSH_9.6"},
            ),
            observation("192.0.2.2", 443, service={"name": "https", "product": "nginx"}),
            observation("192.0.2.3", 53, transport="udp"),
        ],
    )
    _, second = _scan(bob, scanner, ["198.51.100.0/28"], [observation("198.51.100.9", 8080)])
    assert alice.get("/api/assets").get_json()["items"] == []  # not projected yet
    _publish(api.app, first.id)
    _publish(api.app, second.id)

    def ips(session, query=""):
        body = session.get(f"/api/assets{query}").get_json()
        return sorted((i["ip"], i["port"]) for i in body["items"])

    assert ips(alice) == [("192.0.2.1", 22), ("192.0.2.2", 443), ("192.0.2.3", 53)]
    assert ips(bob) == [("198.51.100.9", 8080)]
    assert ips(alice, "?ip=192.0.2.2") == [("192.0.2.2", 443)]
    # An IPv4-mapped address is the IPv4 host, as results store it and the host page reads it.
    assert ips(alice, "?ip=::ffff:192.0.2.2") == [("192.0.2.2", 443)]
    assert ips(alice, "?cidr=192.0.2.0/31") == [("192.0.2.1", 22)]
    assert ips(alice, "?port=22") == [("192.0.2.1", 22)]
    assert ips(alice, "?transport=udp") == [("192.0.2.3", 53)]
    assert ips(alice, "?service=https") == [("192.0.2.2", 443)]
    assert ips(alice, "?product=nginx") == [("192.0.2.2", 443)]
    assert ips(alice, "?q=OpenSSH_9") == [("192.0.2.1", 22)]
    assert ips(alice, "?last_seen_from=2000-01-01T00:00:00Z") == ips(alice)
    assert ips(alice, "?last_seen_to=2000-01-01T00:00:00Z") == []
    item = alice.get("/api/assets?port=22").get_json()["items"][0]
    assert set(item) >= {
        "ip",
        "port",
        "transport",
        "service",
        "product",
        "version",
        "banner",
        "first_seen",
        "last_seen",
        "last_execution_id",
    }
    assert item["last_execution_id"] == first.id
    assert len(ips(admin, "?scope=global")) == 4
    assert alice.get("/api/assets?scope=global").status_code == 403
    page = alice.get("/api/assets?limit=2").get_json()
    rest = alice.get(f"/api/assets?limit=2&cursor={page['next_cursor']}").get_json()
    assert len(page["items"]) == 2 and len(rest["items"]) == 1 and rest["next_cursor"] is None
    for bad in (
        "?ip=nope",
        "?cidr=1.2.3",
        "?port=0",
        "?transport=sctp",
        "?scope=x",
        "?first_seen_from=yesterday",
        "?limit=0",
        "?cursor=zzz",
    ):
        response = alice.get(f"/api/assets{bad}")
        assert response.status_code == 400, bad
        assert response.get_json()["error"]["code"] in ("invalid_parameter", "invalid_cursor")


def test_asset_search_sorts_and_pages_in_every_order(api):
    alice, scanner = api.user(), api.scanner()
    _, upload = _scan(
        alice,
        scanner,
        ["192.0.2.0/28"],
        [
            observation("192.0.2.9", 22, service={"name": "ssh"}),
            observation("192.0.2.2", 443, service={"name": "https"}),
            observation("192.0.2.5", 80, service={"name": "http"}),
            observation("192.0.2.3", 80, service={"name": "http"}),
        ],
    )
    _publish(api.app, upload.id)

    def walk(query):
        seen, cursor = [], ""
        while True:
            body = alice.get(f"/api/assets?limit=1{query}{cursor}").get_json()
            seen.extend((i["ip"], i["port"]) for i in body["items"])
            if not body["next_cursor"]:
                return seen, body
            cursor = f"&cursor={body['next_cursor']}"

    by_ip = [("192.0.2.2", 443), ("192.0.2.3", 80), ("192.0.2.5", 80), ("192.0.2.9", 22)]
    assert walk("")[0] == by_ip
    assert walk("&sort=ip&order=desc")[0] == by_ip[::-1]
    by_port = [("192.0.2.9", 22), ("192.0.2.3", 80), ("192.0.2.5", 80), ("192.0.2.2", 443)]
    assert walk("&sort=port")[0] == by_port
    assert walk("&sort=port&order=desc")[0] == by_port[::-1]
    by_service = [("192.0.2.3", 80), ("192.0.2.5", 80), ("192.0.2.2", 443), ("192.0.2.9", 22)]
    assert walk("&sort=service")[0] == by_service
    assert walk("&sort=service&order=desc&port=80")[0] == [("192.0.2.5", 80), ("192.0.2.3", 80)]
    # Newest first by default; ascending is the exact reverse (ties included).
    newest = walk("&sort=last_seen")[0]
    assert sorted(newest) == by_ip and walk("&sort=last_seen&order=asc")[0] == newest[::-1]
    items = alice.get("/api/assets?sort=last_seen").get_json()["items"]
    assert [(i["ip"], i["port"]) for i in items] == newest
    assert [i["last_seen"] for i in items] == sorted((i["last_seen"] for i in items), reverse=True)

    port_page = alice.get("/api/assets?limit=1&sort=port").get_json()
    for other in ("", "&sort=port&order=desc", "&sort=ip", "&sort=service"):
        response = alice.get(f"/api/assets?limit=1{other}&cursor={port_page['next_cursor']}")
        assert response.status_code == 400, other
        assert response.get_json()["error"]["code"] == "invalid_cursor"
    for bad, parameter in (
        ("?sort=banner", "sort"),
        ("?sort=", None),  # empty: the default, like every other parameter
        ("?order=up", "order"),
        ("?sort=port&order=DESC", "order"),
    ):
        response = alice.get(f"/api/assets{bad}")
        if parameter is None:
            assert response.status_code == 200, bad
            continue
        assert response.status_code == 400, bad
        error = response.get_json()["error"]
        assert error["code"] == "invalid_parameter" and error["details"] == {
            "parameter": parameter
        }, bad
        assert parameter in error["message"]


def test_assets_appear_after_the_projection_and_status_becomes_ready(api):
    from app.projection.slices import ProjectionWorker
    from app.search import open_store
    from tests.support.projection import drain

    user, scanner = api.user(), api.scanner()
    task, upload = _scan(
        user,
        scanner,
        ["192.0.2.0/28"],
        [observation("192.0.2.1", 22), observation("192.0.2.2", 80)],
    )
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["status"] == "succeeded" and detail["projection_status"] == "pending"
    assert user.get("/api/assets").get_json()["items"] == []  # results first, assets later
    assert len(user.get(f"/api/tasks/{task['id']}/results").get_json()["items"]) == 2
    settings = api.app.extensions["netmap.settings"]
    drain(ProjectionWorker(settings, open_store(settings)))
    detail = user.get(f"/api/tasks/{task['id']}").get_json()["task"]
    assert detail["projection_status"] == "ready"
    items = user.get("/api/assets").get_json()["items"]
    assert sorted((i["ip"], i["port"]) for i in items) == [("192.0.2.1", 22), ("192.0.2.2", 80)]
    assert {i["last_execution_id"] for i in items} == {upload.id}


def test_a_results_page_is_utf8_json_holding_exactly_what_was_uploaded(api):
    # Responses are encoded by orjson (app.http.json_provider): text outside ASCII is
    # written as UTF-8, keys sorted, and the values read back as uploaded.
    user, scanner = api.user(), api.scanner()
    banner = 'Añejo — 日本語 \U0001f600 "quoted" \\ back\nslash'
    service = {"name": "http", "product": "Ünïcode", "version": "1.0", "banner": banner}
    task, _ = _scan(
        user, scanner, ["192.0.2.0/28"], [observation("192.0.2.3", 80, service=service)]
    )
    answer = user.get(f"/api/tasks/{task['id']}/results")
    assert answer.status_code == 200 and answer.mimetype == "application/json"
    assert "Añejo — 日本語".encode() in answer.data  # not \u escapes
    body = json.loads(answer.data)
    assert list(body) == sorted(body)
    [item] = body["items"]
    assert (item["banner"], item["product"], item["service"]) == (banner, "Ünïcode", "http")
    assert list(item) == sorted(item)


def test_assets_and_results_carry_their_certificate_and_http_facts(api):
    """docs/inventory.md: the ``tls`` and ``http`` documents are returned with the asset
    (only the host page showed them); the rest of the details stays in exports."""
    user, scanner = api.user(), api.scanner()
    tls = {
        "subject_cn": "shop.example.com",
        "sha256": "ab" * 32,
        "not_after": "2027-01-01T00:00:00Z",
    }
    task, upload = _scan(
        user,
        scanner,
        ["192.0.2.0/28"],
        [observation("192.0.2.1", 443, tls=tls, http={"title": "Shop"})],
    )
    _publish(api.app, upload.id)
    (asset,) = user.get("/api/assets").get_json()["items"]
    assert asset["details"] == {"tls": tls, "http": {"title": "Shop"}}
    (result,) = user.get(f"/api/tasks/{task['id']}/results").get_json()["items"]
    assert result["details"] == asset["details"]
