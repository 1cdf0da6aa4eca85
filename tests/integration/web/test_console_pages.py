"""The web console over the Flask test client: pages, forms, CSRF, escaping, scoping (WEB-1..6).

Sessions are real (signed in through the console's own form or the API), data
is real (tasks created through the console, observations uploaded through the
scanner protocol helpers, current assets published as the projection does).
"""

from __future__ import annotations

import html
import re
from urllib.parse import unquote_plus

import pytest

from tests.support.scanner_protocol import claim, observation

XSS = '<script>alert("x")</script><img src=x onerror=alert(1)>'


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', html)
    assert match, "form without a CSRF field"
    return match.group(1)


def _sign_in(api, username: str, password: str):
    client = api.app.test_client()
    page = client.get("/console/sign-in")
    assert page.status_code == 200
    response = client.post(
        "/console/sign-in",
        data={"username": username, "password": password, "csrf_token": _csrf(page.text)},
    )
    assert response.status_code == 303, response.text
    return client


def _user_client(api, *, admin: bool = False):
    created = api.create_user(admin=admin)
    return _sign_in(api, created["username"], created["password"]), created


def _post_form(client, path: str, data: dict, *, from_page: str | None = None):
    page = client.get(from_page or path)
    return client.post(path, data={**data, "csrf_token": _csrf(page.text)})


def _new_task(client, fields: dict) -> str:
    """A task made through the console's form; its page's address."""
    created = _post_form(client, "/console/tasks/new", fields)
    assert created.status_code == 303, created.text
    return created.headers["Location"]


def _publish(app, execution_id):
    from app.http import context
    from app.projection.pages import current_asset_documents
    from app.search.documents import merge_all

    with app.app_context():
        store = context.store()
    docs = store.read_execution_endpoints(execution_id, after_id=None, limit=1000)
    store.publish_current(
        merge_all(current_asset_documents(docs)), max_operations=1000, max_bytes=5_000_000
    ).raise_for_failures()


@pytest.mark.parametrize("signed_in", [False, True])
def test_an_address_under_console_that_is_no_page_gets_the_consoles_not_found(api, signed_in):
    client = _user_client(api)[0] if signed_in else api.app.test_client()
    for path in ("/console/nope", "/console/tasks/1/nope", "/console/static/nope.css"):
        page = client.get(path, headers={"Accept": "text/html"})
        assert page.status_code == 404, path
        assert page.mimetype == "text/html", path
        assert 'data-error-code="not_found"' in page.text
        assert '<a href="/console/">Back to the dashboard</a>' in page.text
        # A static file that is missing is found by its route, which says so itself.
        assert ("There is no console page at this address." in page.text) == ("static" not in path)
    # Elsewhere an unknown address keeps the API's JSON answer, and a wrong method its Allow.
    for path in ("/api/nope", "/nope"):
        answer = client.get(path, headers={"Accept": "text/html"})
        assert answer.status_code == 404 and answer.json["error"]["code"] == "not_found"
    wrong = client.delete("/console/sign-in")
    assert wrong.status_code == 405 and "GET" in wrong.headers["Allow"]
    # A form's action opened as a page: the console's error page (it was the API's JSON).
    action = client.get("/console/sign-out", headers={"Accept": "text/html"})
    assert action.status_code == 405 and action.mimetype == "text/html"
    assert 'data-error-code="method_not_allowed"' in action.text
    assert "POST" in action.headers["Allow"]


def test_anonymous_visitors_are_sent_to_sign_in_and_back(api):
    client = api.app.test_client()
    response = client.get("/console/tasks?status=queued")
    assert response.status_code == 302
    assert response.headers["Location"].startswith("/console/sign-in?next=")
    created = api.create_user()
    page = client.get(response.headers["Location"])
    signed = client.post(
        "/console/sign-in",
        data={
            "username": created["username"],
            "password": created["password"],
            "csrf_token": _csrf(page.text),
            "next": "/console/tasks?status=queued",
        },
    )
    assert signed.status_code == 303
    assert signed.headers["Location"] == "/console/tasks?status=queued"
    # Another site is never a redirect target.
    assert _sign_in_next(api, "//evil.example/") == "/console/"
    assert _sign_in_next(api, "https://evil.example/console/") == "/console/"


@pytest.mark.parametrize(
    "target",
    [
        "/console/\r\nSet-Cookie: a=b",
        "/console/tasks\n",
        "/console/\x00",
        "/console/\tx",
        "/console/a b",
        "/console/\x7f",
        "/console/\u2028",
    ],
)
def test_a_next_target_with_control_characters_is_dropped(api, target):
    client = api.app.test_client()
    page = client.get("/console/sign-in", query_string={"next": target})
    assert page.status_code in (200, 400)  # NUL bytes in a query are refused app-wide
    assert target not in page.text
    if "\x00" in target:
        # ... and in a form's fields: the sign-in is refused, naming the field.
        refused = _sign_in_next_answer(api, target)
        assert (
            refused.status_code == 400 and "form field &#39;next&#39; contains NUL" in refused.text
        )
        return
    assert _sign_in_next(api, target) == "/console/"


def _sign_in_next(api, target: str) -> str:
    return _sign_in_next_answer(api, target).headers["Location"]


def _sign_in_next_answer(api, target: str):
    created = api.create_user()
    client = api.app.test_client()
    page = client.get("/console/sign-in")
    response = client.post(
        "/console/sign-in",
        data={
            "username": created["username"],
            "password": created["password"],
            "csrf_token": _csrf(page.text),
            "next": target,
        },
    )
    return response


def test_wrong_password_and_the_rate_limit_message(tmp_path, database_url, engine):
    from app import create_app
    from tests.support.api import Api
    from tests.support.settings import make_settings

    settings = make_settings(database_url, tmp_path, security={"login_rate_limit": "2 per hour"})
    api = Api(create_app(settings, engine=engine, modules="off"))
    client = api.app.test_client()
    page = client.get("/console/sign-in")
    token = _csrf(page.text)
    form = {"username": "nobody", "password": "wrong password", "csrf_token": token}
    first = client.post("/console/sign-in", data=form)
    assert first.status_code == 401 and "Wrong username or password" in first.text
    # Fixed one-hour windows: the third attempt is refused, unless the attempts straddle
    # a window's end, which can happen once in this short span; then the new window's
    # third is.
    answers = [client.post("/console/sign-in", data=form) for _ in range(2)]
    if answers[-1].status_code != 429:
        answers += [client.post("/console/sign-in", data=form) for _ in range(3)]
    limited = next(a for a in answers if a.status_code != 401)
    assert limited.status_code == 429
    wait = int(limited.headers["Retry-After"])
    assert wait > 0
    assert f"Wait {wait} seconds" in limited.text


def test_csrf_failure_shows_a_clear_page_and_changes_nothing(api):
    client, _ = _user_client(api)
    response = client.post(
        "/console/tasks/new", data={"name": "x", "targets": "192.0.2.1", "ports": "80"}
    )
    assert response.status_code == 403
    assert response.mimetype == "text/html"
    assert 'data-error-code="csrf_failed"' in response.text
    assert "nothing was changed" in response.text
    wrong = client.post(
        "/console/tasks/new",
        data={"name": "x", "targets": "192.0.2.1", "ports": "80", "csrf_token": "forged"},
    )
    assert wrong.status_code == 403
    assert "No tasks." in client.get("/console/tasks").text
    # Signing out is a form too.
    assert client.post("/console/sign-out").status_code == 403


def test_sign_out_ends_the_server_side_session(api):
    client, _ = _user_client(api)
    page = client.get("/console/")
    assert page.status_code == 200
    response = client.post("/console/sign-out", data={"csrf_token": _csrf(page.text)})
    assert response.status_code == 303
    assert client.get("/console/").status_code == 302
    assert client.get("/api/auth/me").status_code == 401


def test_create_task_shows_per_line_errors_and_keeps_the_input(api):
    client, _ = _user_client(api)
    targets = "192.0.2.1\n\nnot a host!\n198.51.100.0/24\n999.1.1.1\n"
    response = _post_form(
        client, "/console/tasks/new", {"name": "bad", "targets": targets, "ports": "22,99999"}
    )
    assert response.status_code == 400
    html = response.text
    lines = dict(
        re.findall(
            r'<li data-line="(\d+)"><span class="line-no">line \d+</span> <code>([^<]*)</code>',
            html,
        )
    )
    assert lines == {"3": "not a host!", "5": "999.1.1.1"}
    assert "99999: ports must be 1-65535" in html
    assert "198.51.100.0/24" in html  # the textarea keeps what was typed
    assert "No tasks." in client.get("/console/tasks").text


def test_create_task_then_detail_results_and_list(api):
    client, _created = _user_client(api)
    response = _post_form(
        client,
        "/console/tasks/new",
        {
            "name": "web",
            "targets": "192.0.2.0/30\n",
            "ports": "22,443",
            "transports": "tcp",
            "profile": "deep",
        },
    )
    assert response.status_code == 303
    task_url = response.headers["Location"]
    task_id = int(task_url.rsplit("/", 1)[1])
    detail = client.get(task_url)
    assert detail.status_code == 200
    assert '<dd id="task-profile">deep</dd>' in detail.text
    assert (
        api.login(_username(client)).get(f"/api/tasks/{task_id}").get_json()["task"]["profile"]
        == "deep"
    )
    assert 'id="task-status" class="status status-queued">queued<' in detail.text
    assert 'data-in-flight="true"' in detail.text
    assert 'http-equiv="refresh"' in detail.text  # without JavaScript it still refreshes
    scanner = api.scanner()
    upload = claim(scanner)
    assert (
        upload.final(0, [observation("192.0.2.1", 22), observation("192.0.2.2", 443)]).status_code
        == 200
    )
    results = client.get(f"/console/tasks/{task_id}/results")
    assert results.status_code == 200
    assert results.text.count('<td class="ip">') == 2
    assert "2 addresses · 2 endpoints" in results.text
    listed = client.get("/console/tasks")
    assert f'href="/console/tasks/{task_id}"' in listed.text


def test_task_list_pages_by_keyset(api):
    client, _ = _user_client(api)
    user = api.login(_username(client))
    for i in range(53):
        assert (
            user.post(
                "/api/tasks", json={"name": f"t{i}", "targets": ["192.0.2.1"], "ports": "80"}
            ).status_code
            == 201
        )
    first = client.get("/console/tasks")
    assert first.text.count('class="task-name"') == 50
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text).group(1).replace("&amp;", "&")
    second = client.get(next_url)
    assert second.text.count('class="task-name"') == 3
    assert 'rel="next"' not in second.text


def _username(client) -> str:
    return client.get("/api/auth/me").get_json()["user"]["username"]


def test_other_users_tasks_are_not_found_and_admin_pages_are_forbidden(api):
    alice, _ = _user_client(api)
    bob, _ = _user_client(api)
    response = _post_form(
        alice, "/console/tasks/new", {"name": "mine", "targets": "192.0.2.1", "ports": "80"}
    )
    task_url = response.headers["Location"]
    assert bob.get(task_url).status_code == 404
    assert bob.get(task_url + "/results").status_code == 404
    assert "mine" not in bob.get("/console/tasks").text
    for page in ("/console/scanners", "/console/users", "/console/admin/renderer"):
        forbidden = bob.get(page)
        assert forbidden.status_code == 403 and forbidden.mimetype == "text/html"


def _link(html: str, anchor_id: str) -> str:
    match = re.search(rf'<a href="([^"]+)"[^>]*id="{anchor_id}"', html)
    assert match, anchor_id
    return match.group(1).replace("&amp;", "&")


def _rows(html: str) -> list[tuple[str, str]]:
    return re.findall(r'<td class="ip">([^<]+)</td>\s*<td>(\d+)/', html)


def _check_sorting(client):
    """WEB-12: headers sort (aria-sort on the active one), keep the filters; paging keeps
    the sort; all through plain links."""
    page = client.get("/console/assets?service=ssh").text
    assert 'aria-sort="ascending"><a href=' in page and page.count("aria-sort=") == 1
    by_port = _link(page, "sort-port")
    assert "service=ssh" in by_port and "sort=port" in by_port and "order=asc" in by_port
    # By port descending over ssh (22) and nothing else: the filter survived the header.
    port_desc = client.get(_link(client.get(by_port).text, "sort-port")).text
    active = r'aria-sort="descending"><a href="[^"]+" class="sort" id="sort-port"'
    assert re.search(active, port_desc)
    rows = _rows(port_desc)
    assert len(rows) == 50 and {port for _ip, port in rows} == {"22"}
    assert [ip for ip, _ in rows] == sorted(
        (ip for ip, _ in rows), key=lambda ip: tuple(map(int, ip.split("."))), reverse=True
    )
    next_url = re.search(r'href="([^"]+)" rel="next"', port_desc).group(1).replace("&amp;", "&")
    assert "sort=port" in next_url and "order=desc" in next_url and "service=ssh" in next_url
    rest = _rows(client.get(next_url).text)
    assert len(rest) == 5 and not set(rest) & set(rows)
    everything = _rows(client.get("/console/assets?sort=port&order=desc&limit=500").text)
    assert everything[0] == ("192.0.2.200", "443") and len(everything) == 56
    # The search form keeps the order; the last-seen header starts newest first.
    assert 'name="sort" value="port"' in port_desc and 'name="order" value="desc"' in port_desc
    assert "order=desc" in _link(port_desc, "sort-last_seen")
    bad = client.get("/console/assets?sort=banner")
    assert bad.status_code == 400 and "sort must be one of" in bad.text


def test_asset_search_filters_paging_and_bad_input(api):
    client, created = _user_client(api)
    user = api.login(created["username"])
    user.post("/api/tasks", json={"name": "a", "targets": ["192.0.2.0/24"], "ports": "1-65535"})
    scanner = api.scanner()
    upload = claim(scanner)
    observations = [
        observation(f"192.0.2.{i}", 22, service={"name": "ssh", "product": "OpenSSH"})
        for i in range(1, 56)
    ] + [observation("192.0.2.200", 443, service={"name": "https", "product": "nginx"})]
    assert upload.final(0, observations).status_code == 200
    _publish(api.app, upload.id)
    first = client.get("/console/assets")
    assert first.text.count('<td class="ip">') == 50
    next_url = re.search(r'href="([^"]+)" rel="next"', first.text).group(1).replace("&amp;", "&")
    assert client.get(next_url).text.count('<td class="ip">') == 6
    https = client.get("/console/assets?service=https")
    assert https.text.count('<td class="ip">') == 1 and "192.0.2.200" in https.text
    narrow = client.get("/console/assets?cidr=192.0.2.0/30&port=22")
    assert narrow.text.count('<td class="ip">') == 3
    bad = client.get("/console/assets?cidr=nonsense")
    assert bad.status_code == 400 and "cidr must be a network" in bad.text
    _check_sorting(client)
    # Owner scoping: another user sees none of these; only an admin may ask for the global view.
    other, _ = _user_client(api)
    assert other.get("/console/assets").text.count('<td class="ip">') == 0
    assert other.get("/console/assets?scope=global").status_code == 403
    dashboard = client.get("/console/")
    assert re.search(
        r'id="open-assets">\s*<span class="label">Current assets</span>\s*<span class="number">56<',
        dashboard.text,
    )


@pytest.mark.parametrize("admin", [False, True])
def test_the_dashboard_says_how_to_start_until_there_is_a_task(api, admin):
    client, _ = _user_client(api, admin=admin)
    first = client.get("/console/").text
    assert 'id="first-steps"' in first and 'href="/console/tasks/new"' in first
    assert "netmap agent --server http://localhost" in first
    # An admin is sent to the scanners page for a token; a user is told to ask for one.
    assert ('href="/console/scanners"' in first) == admin
    assert ("ask an admin for a scanner token" in first) == (not admin)
    made = _post_form(
        client, "/console/tasks/new", {"name": "first", "targets": "192.0.2.1", "ports": "22"}
    )
    assert made.status_code == 303
    assert 'id="first-steps"' not in client.get("/console/").text


def test_search_help_lists_every_field_and_each_example_runs(api):
    from app.search.query_language import FIELDS, parse_query

    client, _ = _user_client(api)
    assets = client.get("/console/assets").text
    assert 'href="/console/help/search"' in assets and "docs/search-language.md" not in assets
    page = client.get("/console/help/search")
    assert page.status_code == 200
    assert re.findall(r'<tr data-field="([^"]+)">', page.text) == list(FIELDS)
    links = re.findall(r'<a href="(/console/assets\?q=[^"]+)"><code>', page.text)
    assert len(links) == len(FIELDS) + 5
    for link in map(html.unescape, links):  # as a browser reads the attribute
        query = unquote_plus(link.split("?q=", 1)[1])
        parse_query(query)  # raises on a query the language refuses
        assert client.get(link).status_code == 200, query


def test_markup_in_every_user_controlled_field_is_escaped(api):
    admin_client, admin_created = _user_client(api, admin=True)
    admin = api.login(admin_created["username"])
    created = admin.post(
        "/api/tasks", json={"name": XSS, "targets": ["192.0.2.0/28"], "ports": "1-65535"}
    )
    assert created.status_code == 201
    task_id = created.get_json()["task"]["id"]
    scanner = api.scanner()
    upload = claim(scanner)
    hostile = observation(
        "192.0.2.5",
        80,
        hostname=XSS,
        service={"name": XSS, "product": XSS, "version": XSS, "banner": XSS},
        tags=["web"],  # tags are validated to [a-z0-9._:-]: markup cannot get in there
    )
    response = upload.final(0, [hostile])
    assert response.status_code == 200, response.get_json()
    _publish(api.app, upload.id)
    pages = [
        "/console/tasks",
        f"/console/tasks/{task_id}",
        f"/console/tasks/{task_id}/results",
        "/console/assets",
        "/console/assets?q=%3Cscript%3E",
    ]
    for page in pages:
        html = admin_client.get(page).text
        assert "<script>alert" not in html, page
        assert "<img src=x" not in html, page
        assert "&lt;script&gt;alert" in html, page
    # A scanner or user name cannot carry markup at all (their names are validated).
    bad = _post_form(admin_client, "/console/scanners", {"name": XSS})
    assert bad.status_code == 400 and "<script>alert" not in bad.text
    # Echoed search input is escaped as well.
    echoed = admin_client.get("/console/assets?ip=%22%3E%3Cscript%3Ealert(1)%3C/script%3E")
    assert echoed.status_code == 400 and "<script>alert(1)" not in echoed.text


def test_pages_send_the_strict_security_headers(api):
    client, _ = _user_client(api)
    response = client.get("/console/")
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert "<script>" not in response.text and " on" + "click=" not in response.text
    static = client.get("/console/static/console.js")
    assert static.status_code == 200
    assert client.get("/console/static/../access.py").status_code == 404


def test_scanner_token_shown_once_and_revoke(api):
    admin_client, _ = _user_client(api, admin=True)
    response = _post_form(admin_client, "/console/scanners", {"name": "edge-1"})
    assert response.status_code == 201
    assert response.headers["Cache-Control"] == "no-store"
    token = re.search(r'id="token-value">([^<]+)<', response.text).group(1)
    assert token.startswith("nms_")
    # The agent's command line, ready to paste on the scan host.
    assert (
        f'id="new-agent-command">NETMAP_SCANNER_TOKEN={token} netmap agent --server '
        "http://localhost</code>" in response.text
    )
    listing = admin_client.get("/console/scanners").text
    assert "edge-1" in listing and token not in listing
    scanner_id = int(re.search(r"/console/scanners/(\d+)/revoke", listing).group(1))
    scanner_call = api.app.test_client().post(
        "/api/scanner/claim", headers={"Authorization": f"Bearer {token}"}
    )
    assert scanner_call.status_code == 204
    revoked = _post_form(
        admin_client, f"/console/scanners/{scanner_id}/revoke", {}, from_page="/console/scanners"
    )
    assert revoked.status_code == 303
    again = api.app.test_client().post(
        "/api/scanner/claim", headers={"Authorization": f"Bearer {token}"}
    )
    assert again.status_code == 401
    listing = admin_client.get("/console/scanners").text
    # It claimed a moment ago, yet it is shown as revoked only (it read "online revoked").
    assert 'data-status="revoked"' in listing and 'data-status="online"' not in listing


def test_users_page_creates_and_disables(api):
    admin_client, _ = _user_client(api, admin=True)
    created = _post_form(
        admin_client, "/console/users", {"username": "newbie", "password": "long enough password"}
    )
    assert created.status_code == 201 and "newbie" in created.text
    victim = api.login("newbie", "long enough password")
    listing = admin_client.get("/console/users").text
    user_id = victim.id
    assert f"/console/users/{user_id}/disable" in listing
    response = _post_form(
        admin_client, f"/console/users/{user_id}/disable", {}, from_page="/console/users"
    )
    assert response.status_code == 303
    assert victim.get("/api/auth/me").status_code == 401
    weak = _post_form(admin_client, "/console/users", {"username": "weak", "password": "short"})
    assert weak.status_code == 400


def test_renderer_publish_and_revision_conflict(api):
    admin_client, _ = _user_client(api, admin=True)
    page = admin_client.get("/console/admin/renderer")
    if "not running in this process" in page.text:
        pytest.skip("renderer off in this app")
    revision = int(re.search(r'name="expected_revision" value="(\d+)"', page.text).group(1))
    token = _csrf(page.text)
    form = {"release_id": "builtin", "change_reason": "console test", "csrf_token": token}
    ok = admin_client.post("/console/admin/renderer", data={**form, "expected_revision": revision})
    assert ok.status_code == 200 and 'id="publish-notice"' in ok.text
    stale = admin_client.post(
        "/console/admin/renderer", data={**form, "expected_revision": revision}
    )
    assert stale.status_code == 409
    assert 'id="revision-conflict"' in stale.text
    assert f"revision {revision + 1} is now published" in stale.text


def test_export_from_the_task_page(api):
    client, _ = _user_client(api)
    task_url = _new_task(client, {"name": "exp", "targets": "192.0.2.0/30", "ports": "22"})
    early = _post_form(client, task_url + "/exports", {"format": "csv"}, from_page=task_url)
    assert early.status_code == 409 and "no succeeded execution" in early.text
    # Said on the task page, beside its Export button (it was the generic error page).
    assert 'id="export-error" data-error-code="no_succeeded_execution"' in early.text
    assert 'id="export-form"' in early.text and 'id="run-now-form"' in early.text
    upload = claim(api.scanner())
    assert upload.final(0, [observation("192.0.2.1", 22)]).status_code == 200
    requested = _post_form(client, task_url + "/exports", {"format": "csv"}, from_page=task_url)
    assert requested.status_code == 303 and requested.headers["Location"] == "/console/exports"
    listing = client.get("/console/exports").text
    assert re.search(r"<td>csv</td>\s*<td class=\"status-queued\">queued", listing)
    other, _ = _user_client(api)
    assert "No exports." in other.get("/console/exports").text
    bad = _post_form(client, task_url + "/exports", {"format": "exe"}, from_page=task_url)
    assert bad.status_code == 400


def test_task_page_runs_cancel_run_now_and_delete(api):
    client, _ = _user_client(api)
    task_url = _new_task(client, {"name": "runs", "targets": "192.0.2.0/30", "ports": "22"})
    page = client.get(task_url).text
    (run_row,) = re.findall(r'<tr data-run-id="(\d+)">', page)
    assert 'id="run-now-form"' in page and 'data-field="status">queued' in page

    busy = _post_form(client, task_url + "/runs", {}, from_page=task_url)
    assert busy.status_code == 409 and 'data-error-code="run_active"' in busy.text
    cancelled = _post_form(client, f"{task_url}/runs/{run_row}/cancel", {}, from_page=task_url)
    assert cancelled.status_code == 303 and cancelled.headers["Location"] == task_url
    page = client.get(task_url).text
    assert 'data-field="status">cancelled' in page
    # The cancelled execution is counted with the others (the counts left it out).
    assert 'cancelled <span data-count="cancelled">1</span>' in page
    started = _post_form(client, task_url + "/runs", {}, from_page=task_url)
    assert started.status_code == 303
    page = client.get(task_url).text
    assert len(re.findall(r"<tr data-run-id=", page)) == 2

    confirm = client.get(task_url + "/delete")
    assert confirm.status_code == 200 and "cannot be undone" in confirm.text
    deleted = _post_form(client, task_url + "/delete", {}, from_page=task_url + "/delete")
    assert deleted.status_code == 303 and deleted.headers["Location"] == "/console/tasks"
    assert client.get(task_url).status_code == 404
    assert task_url not in client.get("/console/tasks").text


def test_task_page_tells_the_latest_runs_endpoints_from_the_sum_over_runs(api):
    """A monitored task's runs each find its endpoints again: the page must not show
    their sum as the task's endpoints."""
    client, _ = _user_client(api)
    task_url = _new_task(client, {"name": "twice", "targets": "192.0.2.0/30", "ports": "22"})
    summary = '<span class="status status-queued" data-latest-run="status">'
    assert 'id="latest-run">1 · ' + summary in client.get(task_url).text
    scanner = api.scanner()
    found = [observation("192.0.2.1", 22), observation("192.0.2.2", 22)]
    assert claim(scanner).final(0, found).status_code == 200
    assert _post_form(client, task_url + "/runs", {}, from_page=task_url).status_code == 303
    assert claim(scanner).final(0, found[:1]).status_code == 200

    text = _visible_text(client.get(task_url).text)
    assert "Latest run 2 · succeeded · 1 endpoint, 1 observation" in text
    assert "Endpoints, all runs 3 (each kept run's endpoints added up)" in text
    assert "Observations, all runs 3" in text


_INTERNAL_TERMS = ("not_started", "not_applicable", "Projection", "projection backlog")


def _visible_text(html: str) -> str:
    body = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body))


def test_scan_publishing_states_read_in_a_users_words(api):
    client, _created = _user_client(api)
    task_url = _new_task(
        client, {"name": "words", "targets": "192.0.2.8\n", "ports": "22", "transports": "tcp"}
    )
    queued = _visible_text(client.get(task_url).text)
    assert "In the asset view not started yet" in queued
    upload = claim(api.scanner())
    assert upload.final(0, [observation("192.0.2.8", 22)]).status_code == 200
    scanned = _visible_text(client.get(task_url).text)
    assert re.search(r"In the asset view (waiting to be published|published)", scanned)
    admin, _ = _user_client(api, admin=True)  # the backlog card is an admin's
    dashboard = _visible_text(admin.get("/console/").text)
    assert "Scans waiting to reach the asset view" in dashboard
    for text in (queued, scanned, dashboard):
        assert not [term for term in _INTERNAL_TERMS if term in text], text


def test_the_task_form_offers_the_scan_profiles_and_refuses_an_unknown_one(api):
    client, _ = _user_client(api)
    form = client.get("/console/tasks/new").text
    choices = re.findall(r'<input type="radio" name="profile" value="(\w+)"( checked)?>', form)
    assert choices == [("quick", ""), ("standard", " checked"), ("deep", "")]
    response = _post_form(
        client,
        "/console/tasks/new",
        {"name": "odd", "targets": "192.0.2.1", "ports": "80", "profile": "stealth"},
    )
    assert response.status_code == 400
    assert 'id="profile-error">must be quick, standard or deep<' in response.text
    assert 'value="192.0.2.1"' not in response.text  # a textarea keeps it as text
    assert "192.0.2.1</textarea>" in response.text
    assert "No tasks." in client.get("/console/tasks").text
    quick = _post_form(
        client,
        "/console/tasks/new",
        {"name": "fast", "targets": "192.0.2.1", "ports": "80", "profile": "quick"},
    )
    assert quick.status_code == 303
    assert '<dd id="task-profile">quick</dd>' in client.get(quick.headers["Location"]).text


def test_a_task_is_edited_on_the_console_and_its_next_run_scans_the_new_scope(api):
    client, _ = _user_client(api)
    task_url = _new_task(
        client, {"name": "watch", "targets": "192.0.2.0/30", "ports": "22", "transports": "tcp"}
    )
    task_id = int(task_url.rsplit("/", 1)[1])
    assert f'href="{task_url}/edit"' in client.get(task_url).text
    form = client.get(task_url + "/edit")
    assert form.status_code == 200
    assert "192.0.2.0/30</textarea>" in form.text and 'value="22"' in form.text
    assert 'value="standard" checked' in form.text and 'id="save-task"' in form.text

    # A bad line is shown next to it, the input kept, nothing changed.
    refused = _post_form(
        client,
        task_url + "/edit",
        {"name": "watch", "targets": "192.0.2.0/30\nnot a host!", "ports": "22"},
        from_page=task_url + "/edit",
    )
    assert refused.status_code == 400
    assert '<li data-line="2"><span class="line-no">line 2</span> <code>not a host!</code>' in (
        refused.text
    )
    assert "not a host!</textarea>" in refused.text
    empty_name = _post_form(
        client,
        task_url + "/edit",
        {"name": " ", "targets": "192.0.2.0/30", "ports": "22"},
        from_page=task_url + "/edit",
    )
    assert empty_name.status_code == 400 and "must be 1-200 characters" in empty_name.text
    user = api.login(_username(client))
    assert user.get(f"/api/tasks/{task_id}").get_json()["task"]["targets"] == ["192.0.2.0/30"]

    saved = _post_form(
        client,
        task_url + "/edit",
        {
            "name": "watch more",
            "targets": "192.0.2.0/30\n198.51.100.7\n",
            "ports": "22,443",
            "transports": "tcp",
            "profile": "deep",
        },
        from_page=task_url + "/edit",
    )
    assert saved.status_code == 303 and saved.headers["Location"] == task_url
    task = user.get(f"/api/tasks/{task_id}").get_json()["task"]
    assert (task["name"], task["targets"], task["ports"], task["profile"]) == (
        "watch more",
        ["192.0.2.0/30", "198.51.100.7"],
        "22,443",
        "deep",
    )
    # Another user's session cannot open or change it.
    other, _ = _user_client(api)
    assert other.get(task_url + "/edit").status_code == 404


def test_the_task_list_shows_each_tasks_latest_run_and_schedule(api):
    client, _ = _user_client(api)
    user = api.login(_username(client))
    body = {"targets": ["192.0.2.1"], "ports": "22"}
    scanned = user.post("/api/tasks", json={"name": "scanned", **body}).get_json()["task"]
    assert claim(api.scanner()).final(0, [observation("192.0.2.1", 22)]).status_code == 200
    hourly = user.post(
        "/api/tasks", json={"name": "hourly", **body, "schedule": {"every_seconds": 3600}}
    ).get_json()["task"]
    nightly = user.post(
        "/api/tasks",
        json={"name": "nightly", **body, "schedule": {"cron": "0 3 * * *", "timezone": "UTC"}},
    ).get_json()["task"]
    assert user.post(f"/api/tasks/{nightly['id']}/schedule/pause").status_code == 200
    imports = user.post("/api/tasks", json={"name": "imports", **body, "scan": False}).get_json()[
        "task"
    ]

    rows = {
        int(task_id): _visible_text(row)
        for task_id, row in re.findall(
            r"<tr>\s*<td>(\d+)</td>(.*?)</tr>", client.get("/console/tasks").text, flags=re.S
        )
    }
    assert "1 · succeeded 20" in rows[scanned["id"]] and "—" in rows[scanned["id"]]
    assert "1 · queued" in rows[hourly["id"]] and "every 3600 s next 20" in rows[hourly["id"]]
    assert "0 3 * * * UTC paused" in rows[nightly["id"]]
    assert "none (import only)" in rows[imports["id"]]
