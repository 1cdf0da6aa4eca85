"""Saved searches (``/api/searches``), ``GET /api/assets?search=``, facets over HTTP and
on the dashboard."""

from __future__ import annotations

from tests.integration.test_search_language_api import _ips, _seed


def _patch(session, path: str, body: dict):
    return session.client.patch(path, json=body, headers=session._headers(None))


def test_saved_searches_are_owner_scoped_and_checked(api):
    alice, bob = _seed(api), api.user()
    created = alice.post("/api/searches", json={"name": "Expiring", "query": "cert.expires:<30d"})
    assert created.status_code == 201, created.get_json()
    search = created.get_json()["search"]
    assert (search["name"], search["query"]) == ("Expiring", "cert.expires:<30d")

    assert _ips(alice, "", f"&search={search['id']}") == [("192.0.2.2", 443)]
    # q ANDs with the saved search.
    assert _ips(alice, "port:22", f"&search={search['id']}") == []
    assert _ips(alice, "nginx", f"&search={search['id']}") == [("192.0.2.2", 443)]
    facets = alice.get(f"/api/assets/facets?search={search['id']}").get_json()
    assert facets["sampled"] == 1 and facets["facets"]["port"] == [{"value": 443, "count": 1}]

    # Another user neither sees nor uses nor changes it.
    assert bob.get("/api/searches").get_json()["items"] == []
    assert bob.get(f"/api/searches/{search['id']}").status_code == 404
    assert bob.get(f"/api/assets?search={search['id']}").status_code == 404
    assert _patch(bob, f"/api/searches/{search['id']}", {"name": "x"}).status_code == 404
    assert bob.delete(f"/api/searches/{search['id']}").status_code == 404

    renamed = _patch(alice, f"/api/searches/{search['id']}", {"query": "port:22"})
    assert renamed.get_json()["search"]["query"] == "port:22"
    assert _ips(alice, "", f"&search={search['id']}") == [("192.0.2.1", 22)]
    assert [s["id"] for s in alice.get("/api/searches").get_json()["items"]] == [search["id"]]
    # null cannot clear a name or a query: it is refused, and nothing changes.
    for body, code in (
        ({"name": None}, "invalid_name"),
        ({"query": None, "name": "New"}, "invalid_query"),
    ):
        refused = _patch(alice, f"/api/searches/{search['id']}", body)
        assert refused.status_code == 400, refused.get_json()
        assert refused.get_json()["error"]["code"] == code
    kept = alice.get(f"/api/searches/{search['id']}").get_json()["search"]
    assert (kept["name"], kept["query"]) == ("Expiring", "port:22")

    for body, status, code in (
        ({"name": "Second", "query": "x"}, 201, None),
        ({"name": "Second", "query": "y"}, 409, "duplicate_name"),
        ({"name": "Expiring", "query": "y"}, 409, "duplicate_name"),
        ({"name": "bad", "query": "port:"}, 400, "invalid_query"),
        ({"name": "", "query": "x"}, 400, "invalid_name"),
        ({"name": "n" * 101, "query": "x"}, 400, "invalid_name"),
        ({"name": "ok", "query": 7}, 400, "invalid_query"),
        ({"name": "ok", "query": "x", "owner_id": 1}, 400, "unknown_field"),
    ):
        response = alice.post("/api/searches", json=body)
        assert response.status_code == status, (body, response.get_json())
        if code:
            assert response.get_json()["error"]["code"] == code
    error = alice.post("/api/searches", json={"name": "b", "query": "port:abc"}).get_json()
    assert error["error"]["details"]["column"] == 6
    # The field is the body's own name for it (the search language says ``q``).
    assert error["error"]["details"]["field"] == "query"
    assert "parameter" not in error["error"]["details"]
    for query in ("   ", "a\x01b"):
        blank = alice.post("/api/searches", json={"name": "b", "query": query})
        assert blank.status_code == 400 and blank.get_json()["error"]["code"] == "invalid_query"
    assert alice.delete(f"/api/searches/{search['id']}").status_code == 204
    assert alice.get(f"/api/searches/{search['id']}").status_code == 404


def test_facets_over_http_and_on_the_dashboard(api):
    user = _seed(api)
    body = user.get("/api/assets/facets").get_json()
    assert body["capped"] is False and body["sampled"] == 4
    assert body["facets"]["service"][0] == {"value": "https", "count": 2}
    issuers = {f["value"] for f in body["facets"]["cert.issuer"]}
    assert issuers == {"CN=R3,O=Let's Encrypt,C=US", "CN=internal"}
    narrowed = user.get("/api/assets/facets?q=port:443&size=1").get_json()
    assert narrowed["facets"]["service"] == [{"value": "https", "count": 1}]
    assert user.get("/api/assets/facets?q=port:").status_code == 400
    assert user.get("/api/assets/facets?size=51").status_code == 400

    page = user.get("/console/")
    assert page.status_code == 200
    html = page.data.decode()
    assert 'id="asset-facets"' in html and "Top certificate issuers" in html
    # Each value links to the search that finds it, quoted for the language.
    assert "q=cert.issuer:%22CN%3DR3" in html or "q=cert.issuer%3A%22CN%3DR3" in html
