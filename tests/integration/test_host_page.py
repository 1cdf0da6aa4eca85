"""One host's page: ``GET /api/hosts/<ip>`` and the console's page (issue 37)."""

from __future__ import annotations

import re

from tests.integration.test_search_language_api import _seed
from tests.support.scanner_protocol import claim, dns_record, observation


def test_the_host_page_gathers_ports_names_certificates_and_scans(api):
    user = _seed(api)
    body = user.get("/api/hosts/192.0.2.2").get_json()
    assert body["ip"] == "192.0.2.2" and body["open_ports"] == 1
    (port,) = body["ports"]
    assert (port["port"], port["service"], port["status"]) == (443, "https", "open")
    assert port["http"]["title"] == "Shop login" and port["certificate_sha256"] == "ab" * 32
    assert port["last_execution_id"] == body["executions"][0]["execution_id"]
    (certificate,) = body["certificates"]
    assert certificate["issuer"] == "CN=R3,O=Let's Encrypt,C=US" and certificate["ports"] == [443]
    # The task that covered the address (192.0.2.0/28), with its profile.
    assert [e["profile"] for e in body["executions"]] == ["standard"]
    assert body["changes"] == []  # the analysis has not run in this test

    page = user.get("/console/hosts/192.0.2.2")
    assert page.status_code == 200
    html = page.data.decode()
    assert "Shop login" in html and "Let&#39;s Encrypt" in html and 'id="host-ports"' in html
    # Times read as on the other pages (2026-12-07 09:13:04Z), not as stored ISO strings.
    assert re.search(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}Z", html)
    assert not re.search(r"\d{2}:\d{2}:\d{2}(\.\d+)?\+00:00", html)
    # Tables showing addresses link to the host page.
    assert 'href="/console/hosts/192.0.2.2"' in user.get("/console/assets").data.decode()

    # An IPv4-mapped IPv6 spelling is the IPv4 host, as results store it.
    mapped = user.get("/api/hosts/::ffff:192.0.2.2").get_json()
    assert mapped["ip"] == "192.0.2.2" and mapped["open_ports"] == 1
    history = user.get("/api/assets/history?ip=::ffff:192.0.2.2&port=443")
    assert history.status_code == 200, history.get_json()

    # Nothing seen on an address: an empty page, not an error; another user sees nothing.
    empty = user.get("/api/hosts/2001:db8::5").get_json()
    assert empty["ports"] == [] and empty["ip"] == "2001:db8::5"
    other = api.user().get("/api/hosts/192.0.2.2").get_json()
    assert other["ports"] == [] and other["executions"] == []
    for bad in ("nope", "192.0.2.999", "fe80::1%25eth0", "192.0.2.0/24"):
        response = user.get(f"/api/hosts/{bad}")
        assert response.status_code == 400, bad
        assert response.get_json()["error"]["details"]["parameter"] == "ip"


def test_names_resolved_to_the_address_by_dns_executions_are_on_the_host_page(api):
    user, scanner = api.user(), api.scanner()
    created = user.post(
        "/api/tasks", json={"name": "dns", "targets": ["shop.example.test"], "ports": "443"}
    )
    assert created.status_code == 201, created.get_json()
    dns = claim(scanner)
    assert dns.execution["kind"] == "dns"
    final = dns.final(
        0,
        [],
        dns_records=[
            dns_record("shop.example.test", "192.0.2.20"),
            dns_record("shop.example.test", "2001:db8::20", type="AAAA"),
            dns_record("www.shop.example.test", "shop.example.test", type="CNAME"),
        ],
    )
    assert final.status_code == 200, final.get_json()
    names = user.get("/api/hosts/192.0.2.20").get_json()["hostnames"]
    assert names == [{"name": "shop.example.test", "sources": ["dns"]}]
    assert user.get("/api/hosts/2001:db8::20").get_json()["hostnames"][0]["sources"] == ["dns"]
    # Another owner's DNS answers are not theirs to see.
    assert api.user().get("/api/hosts/192.0.2.20").get_json()["hostnames"] == []


def test_the_host_pages_changes_say_what_changed(api, settings):
    """A new version read as a change of nothing on the host page: old and new showed
    service, product and certificate only, with no changed_fields."""
    from tests.integration.analysis.test_analysis_api import _run_workers, _scan
    from tests.integration.web.test_console_pages import _user_client

    client, created = _user_client(api)
    user = api.login(created["username"])
    scanner = api.scanner()
    for version in ("1.24.0", "1.26.1"):
        service = {"name": "http", "product": "nginx", "version": version}
        _scan(user, scanner, [observation("192.0.2.1", 80, service=service)])
        _run_workers(settings)
    changes = user.get("/api/hosts/192.0.2.1").get_json()["changes"]
    assert [c["kind"] for c in changes] == ["changed", "new"]
    changed = changes[0]
    assert changed["changed_fields"] == ["version"]
    assert (changed["old"]["version"], changed["new"]["version"]) == ("1.24.0", "1.26.1")
    assert (changed["port"], changed["transport"]) == (80, "tcp")
    page = client.get("/console/hosts/192.0.2.1").text
    assert "nginx 1.24.0 → open http nginx 1.26.1" in page and "(version)" in page
