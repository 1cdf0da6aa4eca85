"""Saved searches from the console's Assets page: save the search box's query under a
name, list and delete one's searches; every refusal shows the same page again with the
message (the checks are the API's)."""

from __future__ import annotations

import html
import re

from tests.integration.web.test_console_pages import _csrf, _user_client

PAGE = "/console/assets?q=service%3Ahttp&port=8080&sort=port&order=desc"


def _save(client, name: str, *, page: str = PAGE, query: str | None = None):
    shown = client.get(page)
    action = html.unescape(
        re.search(r'<form method="post" action="([^"]+)"[^>]*id="save-search-form"', shown.text)[1]
    )
    typed = re.search(r'name="query" value="([^"]*)"', shown.text)[1]
    form = {"name": name, "query": html.unescape(typed) if query is None else query}
    return client.post(action, data={**form, "csrf_token": _csrf(shown.text)})


def _report_on(user, search_id: int) -> dict:
    """A report definition whose scope is the saved search (which then cannot go)."""
    report = user.post(
        "/api/reports/definitions",
        json={
            "name": "ssh",
            "scope": {"search": search_id},
            "period": "on_demand",
            "recipients": ["a@example.com"],
        },
    )
    assert report.status_code == 201, report.get_json()
    return report.get_json()["definition"]


def _api_searches(api, created) -> list[tuple[str, str]]:
    items = api.login(created["username"]).get("/api/searches").get_json()["items"]
    return [(s["name"], s["query"]) for s in items]


def test_the_search_box_is_saved_and_listed_beside_it(api):
    client, created = _user_client(api)
    page = client.get(PAGE).text
    assert 'id="saved-searches"' not in page  # none yet
    # The page's other fields are not part of a saved search, and the form says so.
    note = re.search(r'id="save-search-note">([^<]+)<', page)[1]
    assert note == "The search box's query is saved; port is not part of a saved search."

    saved = _save(client, "  web servers ")
    assert saved.status_code == 303
    assert (
        saved.headers["Location"] == "/console/assets?port=8080&q=service:http&sort=port&order=desc"
    )
    assert _api_searches(api, created) == [("web servers", "service:http")]
    page = client.get(saved.headers["Location"]).text
    row = re.search(r'<tr data-search-id="(\d+)"><td><a href="([^"]+)">([^<]+)</a>', page)
    assert row[3] == "web servers"
    assert html.unescape(row[2]) == "/console/assets?q=service:http"  # the link runs it
    assert "Saved searches (1)" in page

    other, _ = _user_client(api)
    assert 'id="saved-searches"' not in other.get(PAGE).text  # one's own only


def test_a_refused_save_shows_the_page_again_with_the_message_and_the_name(api):
    client, created = _user_client(api)
    assert _save(client, "mine").status_code == 303
    taken = _save(client, "mine")
    assert taken.status_code == 409
    assert "you already have a saved search named &#39;mine&#39;" in taken.text
    assert 'id="save-name" name="name" value="mine"' in taken.text
    nameless = _save(client, "   ")
    assert nameless.status_code == 400 and "name must be 1 to 100 characters" in nameless.text
    broken = _save(client, "broken", query="port:")
    assert broken.status_code == 400 and 'id="saved-search-error"' in broken.text
    assert _api_searches(api, created) == [("mine", "service:http")]
    # Nothing to save without a query, or with one that does not parse.
    assert 'id="save-search-form"' not in client.get("/console/assets?port=22").text
    bad = client.get("/console/assets?q=port%3A")
    assert bad.status_code == 400 and 'id="save-search-form"' not in bad.text


def test_a_saved_search_is_deleted_unless_a_report_uses_it(api):
    client, created = _user_client(api)
    user = api.login(created["username"])
    kept = user.post("/api/searches", json={"name": "kept", "query": "port:22"}).get_json()
    gone = user.post("/api/searches", json={"name": "gone", "query": "port:23"}).get_json()
    kept_id, gone_id = kept["search"]["id"], gone["search"]["id"]
    _report_on(user, kept_id)
    page = client.get(PAGE)
    token = _csrf(page.text)
    actions = dict(
        (int(i), html.unescape(a))
        for a, i in re.findall(r'action="([^"]+/searches/(\d+)/delete[^"]*)"', page.text)
    )
    assert set(actions) == {kept_id, gone_id}

    deleted = client.post(actions[gone_id], data={"csrf_token": token})
    assert deleted.status_code == 303
    assert (
        deleted.headers["Location"]
        == "/console/assets?port=8080&q=service:http&sort=port&order=desc"
    )
    refused = client.post(actions[kept_id], data={"csrf_token": token})
    assert refused.status_code == 409
    assert (
        "the saved search is used by" in refused.text
        and '<details id="saved-searches" open>' in refused.text
    )
    assert _api_searches(api, created) == [("kept", "port:22")]

    other, _ = _user_client(api)
    foreign = other.post(actions[kept_id], data={"csrf_token": _csrf(other.get(PAGE).text)})
    assert foreign.status_code == 404
    assert _api_searches(api, created) == [("kept", "port:22")]


def test_a_saved_search_in_use_takes_the_search_boxs_query(api):
    client, created = _user_client(api)
    user = api.login(created["username"])
    made = user.post("/api/searches", json={"name": "ssh", "query": "port:22"}).get_json()
    search_id = made["search"]["id"]
    definition = _report_on(user, search_id)
    same = client.get("/console/assets?q=port%3A22").text
    assert f'data-update-search="{search_id}"' not in same  # the box already holds it
    page = client.get("/console/assets?q=port%3A2222")
    action = html.unescape(
        re.search(r'<form method="post" action="([^"]+)" data-update-search=', page.text)[1]
    )
    updated = client.post(action, data={"query": "port:2222", "csrf_token": _csrf(page.text)})
    assert updated.status_code == 303
    assert updated.headers["Location"] == "/console/assets?q=port:2222&sort=ip&order=asc"
    assert _api_searches(api, created) == [("ssh", "port:2222")]
    again = user.get(f"/api/reports/definitions/{definition['id']}").get_json()["definition"]
    assert again["scope"] == {"search": search_id}  # the report follows the search

    broken = client.post(action, data={"query": "port:", "csrf_token": _csrf(page.text)})
    assert broken.status_code == 400 and 'id="saved-search-error"' in broken.text
    other, _ = _user_client(api)
    foreign = other.post(
        action, data={"query": "port:1", "csrf_token": _csrf(other.get(PAGE).text)}
    )
    assert foreign.status_code == 404
    assert _api_searches(api, created) == [("ssh", "port:2222")]
