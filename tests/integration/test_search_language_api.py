"""``GET /api/assets?q=`` in the search language: results, bare words as free text,
errors at their column, and no 500 for any string."""

from __future__ import annotations

import urllib.parse
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.test_search_api import _publish, _scan
from tests.support.scanner_protocol import observation


def _expiring(days: int) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _seed(api):
    user, scanner = api.user(), api.scanner()
    _, upload = _scan(
        user,
        scanner,
        ["192.0.2.0/28"],
        [
            observation(
                "192.0.2.1",
                22,
                service={"name": "ssh", "product": "OpenSSH", "banner": "SSH-2.0-OpenSSH_9.6"},
            ),
            observation(
                "192.0.2.2",
                443,
                service={"name": "https", "product": "nginx"},
                tls={
                    "subject_cn": "shop.example.com",
                    "issuer": "CN=R3,O=Let's Encrypt,C=US",
                    "not_after": _expiring(10),
                    "sha256": "ab" * 32,
                },
                http={"title": "Shop login", "server": "nginx"},
                tags=["dmz"],
                details={
                    "cpe": ["cpe:/a:igor_sysoev:nginx"],
                    "scripts": {"ssl-cert": "Subject: x"},
                },
            ),
            observation(
                "192.0.2.3",
                8443,
                service={"name": "https", "product": "Jetty"},
                tls={
                    "subject_cn": "internal",
                    "issuer": "CN=internal",
                    "not_after": _expiring(400),
                },
            ),
            observation("192.0.2.4", 53, transport="udp"),
        ],
    )
    _publish(api.app, upload.id)
    return user


def _ips(session, q: str, extra: str = ""):
    response = session.get(f"/api/assets?q={urllib.parse.quote(q)}{extra}")
    assert response.status_code == 200, response.get_json()
    return sorted((i["ip"], i["port"]) for i in response.get_json()["items"])


def test_the_language_searches_assets_and_keeps_the_filters(api):
    user = _seed(api)
    assert _ips(user, "port:443") == [("192.0.2.2", 443)]
    assert _ips(user, "service:https -product:jetty") == [("192.0.2.2", 443)]
    assert _ips(user, 'cert.issuer:"Let\'s Encrypt" title:"login"') == [("192.0.2.2", 443)]
    assert _ips(user, "cert.expires:<30d") == [("192.0.2.2", 443)]
    assert _ips(user, "net:192.0.2.0/30 tag:dmz") == [("192.0.2.2", 443)]
    assert _ips(user, "port:22 OR transport:udp") == [("192.0.2.1", 22), ("192.0.2.4", 53)]
    # Individual parameters still work and AND with the query.
    assert _ips(user, "service:https", "&port=8443") == [("192.0.2.3", 8443)]
    # A status clause replaces the default status=open; an explicit status still ANDs.
    assert _ips(user, "status:gone") == []
    assert len(_ips(user, "-status:gone")) == 4
    assert _ips(user, "status:open", "&status=gone") == []


def test_the_console_searches_with_the_language_and_shows_the_facts(api):
    user = _seed(api)
    page = user.get("/console/assets", query_string={"q": 'cert.issuer:"let\'s encrypt"'})
    assert page.status_code == 200
    html = page.data.decode()
    assert "192.0.2.2" in html and "192.0.2.3" not in html
    for shown in ("Shop login", "CN=R3,O=Let&#39;s Encrypt,C=US", "cpe:/a:igor_sysoev:nginx"):
        assert shown in html, shown
    assert 'class="script-output">Subject: x' in html
    bad = user.get("/console/assets", query_string={"q": "port:abc"})
    assert bad.status_code == 400 and "column 6" in bad.data.decode()


def test_bare_words_stay_one_free_text_search(api):
    user = _seed(api)
    assert _ips(user, "OpenSSH_9") == [("192.0.2.1", 22)]
    # Two words are one substring, as q always meant: "SSH-2.0 OpenSSH" is not in a banner.
    assert _ips(user, "SSH-2.0-OpenSSH") == [("192.0.2.1", 22)]
    assert _ips(user, "OpenSSH nginx") == []
    assert _ips(user, "100%") == []


def test_a_query_that_does_not_parse_is_a_400_at_its_column(api):
    user = api.user()
    for q, column in (
        ("port:", 6),
        ("port:abc", 6),
        ("port:443 (service:ssh", 22),
        ("nosuch:1", 1),
        ("cert.expires:30d", 14),
        ("service:>a", 9),
    ):
        response = user.get(f"/api/assets?q={urllib.parse.quote(q)}")
        assert response.status_code == 400, q
        error = response.get_json()["error"]
        assert error["code"] == "invalid_query", q
        assert error["details"]["column"] == column, (q, error)
        assert error["details"]["parameter"] == "q"
        assert error["details"]["expected"], q
        assert f"column {column}" in error["message"]


_ALPHABET = st.sampled_from(
    [*"abcxyz019 :-\"()<>=.*/\\%_'", "port", "cert.expires", "OR", "NOT", "net", "ip", "\t"]
)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(q=st.one_of(st.text(max_size=40), st.lists(_ALPHABET, max_size=12).map("".join)))
def test_any_string_gives_results_or_a_400_never_a_500(api, q):
    user = api.cached_user() if hasattr(api, "cached_user") else _one_user(api)
    response = user.get("/api/assets", query_string={"q": q})
    assert response.status_code in (200, 400), (q, response.get_json())
    if response.status_code == 400:
        assert response.get_json()["error"]["code"] in ("invalid_query", "invalid_parameter")


_users: dict[int, object] = {}


def _one_user(api):
    if id(api) not in _users:
        _users[id(api)] = api.user()
    return _users[id(api)]
