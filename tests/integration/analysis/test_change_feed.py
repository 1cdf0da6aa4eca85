"""What changed across all of one's tasks, newest first: ``GET /api/changes`` and the
console's Changes page (docs/changes.md). Scans go through the scanner protocol and the
projection and analysis workers run as the runner runs them."""

from __future__ import annotations

import html
import re

from tests.integration.analysis.test_analysis_api import _run_workers, _scan
from tests.integration.web.test_console_pages import _sign_in
from tests.support.api import DEFAULT_PASSWORD
from tests.support.scanner_protocol import observation


def _two_scans(api, settings):
    """alice's first task finds 192.0.2.1-2:22 (2 new); her second task, on another net,
    finds 198.51.100.1:22 (1 new); bob's finds 203.0.113.1:22 (1 new, his own)."""
    alice, bob, scanner = api.user(), api.user(), api.scanner()
    first, _ = _scan(alice, scanner, [observation(f"192.0.2.{i}", 22) for i in (1, 2)])
    _run_workers(settings)
    second, _ = _scan(
        alice, scanner, [observation("198.51.100.1", 22)], targets=("198.51.100.0/28",)
    )
    _run_workers(settings)
    _scan(bob, scanner, [observation("203.0.113.1", 22)], targets=("203.0.113.0/28",))
    _run_workers(settings)
    return alice, bob, first, second


def test_the_feed_lists_ones_changes_across_tasks_newest_first(api, settings):
    alice, bob, first, second = _two_scans(api, settings)
    feed = alice.get("/api/changes").get_json()
    rows = [(c["ip"], c["kind"], c["task_id"], c["task_name"]) for c in feed["items"]]
    assert rows == [
        ("198.51.100.1", "new", second["id"], "c"),
        ("192.0.2.2", "new", first["id"], "c"),
        ("192.0.2.1", "new", first["id"], "c"),
    ]
    assert feed["next_cursor"] is None and feed["items"][0]["new"] is not None
    assert [c["ip"] for c in bob.get("/api/changes").get_json()["items"]] == ["203.0.113.1"]

    seen, cursor = [], None
    while True:
        page = alice.get("/api/changes?limit=2" + (f"&cursor={cursor}" if cursor else ""))
        body = page.get_json()
        seen += [c["ip"] for c in body["items"]]
        cursor = body["next_cursor"]
        if not cursor:
            break
    assert seen == [r[0] for r in rows]
    assert alice.get("/api/changes?kind=gone").get_json()["items"] == []
    assert len(alice.get("/api/changes?kind=new").get_json()["items"]) == 3
    bad = alice.get("/api/changes?kind=moved")
    assert bad.status_code == 400 and bad.get_json()["error"]["details"] == {"parameter": "kind"}
    # Another user's cursor or a tampered one is refused, not followed.
    assert alice.get("/api/changes?cursor=abc").status_code == 400


def test_the_changes_page_shows_the_feed_with_task_names(api, settings):
    alice, _bob, first, second = _two_scans(api, settings)
    client = _sign_in(api, alice.user["username"], DEFAULT_PASSWORD)
    assert 'id="changes-link"' in client.get("/console/").text
    page = client.get("/console/changes")
    assert page.status_code == 200
    endpoints = re.findall(r'class="ip" href="[^"]+">([^<]+)</a>', page.text)
    assert endpoints == ["198.51.100.1:22/tcp", "192.0.2.2:22/tcp", "192.0.2.1:22/tcp"]
    tasks = re.findall(r'href="/console/tasks/(\d+)">c</a>', page.text)
    assert tasks == [str(second["id"]), str(first["id"]), str(first["id"])]
    gone = client.get("/console/changes?kind=gone").text
    assert "No changes of kind gone yet." in html.unescape(gone)
    assert client.get("/console/changes?kind=moved").status_code == 400
