"""``/`` leads to the console: the sign-in page when signed out, the dashboard when signed in."""

from __future__ import annotations

from tests.integration.web.test_console_pages import _user_client


def test_root_sends_an_anonymous_visitor_to_sign_in(api):
    client = api.app.test_client()
    root = client.get("/")
    assert root.status_code == 302
    assert root.headers["Location"] == "/console/"
    page = client.get("/", follow_redirects=True)
    assert page.status_code == 200
    assert page.request.path == "/console/sign-in"
    assert 'name="password"' in page.text


def test_root_shows_a_signed_in_user_the_dashboard(api):
    client, created = _user_client(api)
    page = client.get("/", follow_redirects=True)
    assert page.status_code == 200
    assert page.request.path == "/console/"
    assert created["username"] in page.text


def test_the_api_reference_page_lists_every_documented_operation(api):
    from app.http.openapi import openapi_document

    client, _ = _user_client(api)
    page = client.get("/console/api")
    assert page.status_code == 200
    for path, item in openapi_document()["paths"].items():
        for method in item:
            assert f"{method.upper()} {path}" in page.text
    # The task body a new user needs, field by field.
    assert "<code>targets</code> *" in page.text and "22,80,443,8000-8100" in page.text
    assert api.app.test_client().get("/console/api").status_code in (302, 303)
