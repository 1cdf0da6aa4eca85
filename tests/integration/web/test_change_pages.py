"""Change analysis in the console: history, task changes, dashboard week, status filter (WEB-8).

Changes are computed by the real projection and analysis workers from scans
uploaded over the scanner protocol; pages are read through signed-in sessions.
"""

from __future__ import annotations

import html
import re

from app.analysis.worker import AnalysisWorker
from app.projection.slices import ProjectionWorker
from app.search.postgres_store import PostgresStore
from tests.integration.web.test_console_pages import XSS, _user_client
from tests.support.projection import drain
from tests.support.scanner_protocol import claim, observation


def _run_workers(settings) -> None:
    store = PostgresStore(settings)
    try:
        drain(ProjectionWorker(settings, store))
        worker = AnalysisWorker(settings, store)
        while (work := worker.claim()) is not None:
            assert worker.run(work).result == "completed"
    finally:
        store.close()


def _scan(user, scanner, observations) -> int:
    created = user.post(
        "/api/tasks", json={"name": XSS, "targets": ["192.0.2.0/28"], "ports": "22,80"}
    )
    assert created.status_code == 201
    upload = claim(scanner)
    assert upload.final(0, observations).status_code == 200
    return created.get_json()["task"]["id"]


def test_history_changes_dashboard_and_status_filter(api, settings) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    scanner = api.scanner()
    first = [
        observation("192.0.2.1", 22, service={"name": "ssh", "product": XSS}),
        observation("192.0.2.2", 80, service={"name": "http"}),
    ]
    _scan(alice, scanner, first)
    _run_workers(settings)
    task2 = _scan(alice, scanner, first[:1])  # 192.0.2.2:80 is gone
    _run_workers(settings)

    # Task page: counts per kind linking to the keyset-paged list.
    detail = client.get(f"/console/tasks/{task2}")
    assert detail.status_code == 200
    assert re.search(
        rf'href="/console/tasks/{task2}/changes\?kind=gone&amp;run=\d+" data-kind="gone">gone 1<',
        detail.text,
    )
    gone = client.get(f"/console/tasks/{task2}/changes?kind=gone")
    assert gone.status_code == 200
    assert gone.text.count('class="kind-gone"') == 1 and "192.0.2.2:80/tcp" in gone.text
    assert client.get(f"/console/tasks/{task2}/changes?kind=bogus").status_code == 400

    # Endpoint history, linked from the asset rows; markup in values is printed as text.
    assets = client.get("/console/assets?status=all")
    assert "/console/assets/history?ip=192.0.2.2&amp;port=80&amp;transport=tcp" in assets.text
    # Listed beside the open one, the gone endpoint says so (it looked open).
    assert assets.text.count('data-status="gone"') == 1
    assert re.search(
        r'192\.0\.2\.2</td>\s*<td>80/tcp</td>\s*<td>open <span class="badge asset-gone"',
        assets.text,
    )
    assert client.get("/console/assets?status=gone").text.count('<td class="ip">') == 1
    assert client.get("/console/assets").text.count('<td class="ip">') == 1
    history = client.get("/console/assets/history?ip=192.0.2.2&port=80&transport=tcp")
    assert history.status_code == 200
    assert 'id="history-status">gone<' in history.text
    assert history.text.count('class="kind-new"') == 1
    assert history.text.count('class="kind-gone"') == 1
    for page in (
        "/console/assets/history?ip=192.0.2.1&port=22",
        f"/console/tasks/{task2 - 1}/changes",
        f"/console/tasks/{task2}",
    ):
        html = client.get(page).text
        assert "<script>alert" not in html and "&lt;script&gt;alert" in html, page
    assert client.get("/console/assets/history?ip=nope&port=22").status_code == 400
    assert client.get("/console/assets/history?ip=192.0.2.1&port=0").status_code == 400

    # Dashboard: new and gone of the last week, linking to the filtered lists.
    dashboard = client.get("/console/").text
    assert re.search(r'id="recent-new">.*?<span class="number">2<', dashboard, re.S)
    assert re.search(r'id="recent-gone">.*?<span class="number">1<', dashboard, re.S)
    # The card counts endpoints that went that week: it links to those events (the list
    # of what is gone now differs as soon as one comes back).
    assert 'href="/console/changes?kind=gone" id="recent-gone"' in dashboard
    assert client.get("/console/changes?kind=gone").text.count('class="kind-gone"') == 1
    # The new ones: the assets first seen in that week, whatever their status now.
    new_link = re.search(r'href="([^"]+)" id="recent-new"', dashboard)[1].replace("&amp;", "&")
    assert new_link == "/console/assets?status=all&q=first_seen:%3E7d"
    assert client.get(new_link).text.count('<td class="ip">') == 2

    # Owner scoping: Bob sees neither the history nor the task's changes, and his week is empty.
    bob, _ = _user_client(api)
    assert bob.get(f"/console/tasks/{task2}/changes").status_code == 404
    other = bob.get("/console/assets/history?ip=192.0.2.2&port=80&transport=tcp")
    assert other.status_code == 200 and 'class="kind-' not in other.text
    assert 'id="history-status">never seen<' in other.text
    assert re.search(r'id="recent-new">.*?<span class="number">0<', bob.get("/console/").text, re.S)


def test_the_changes_page_shows_a_run_and_compares_two(api, settings) -> None:
    client, created = _user_client(api)
    alice = api.login(created["username"])
    scanner = api.scanner()
    task = _scan(
        alice,
        scanner,
        [observation("192.0.2.1", 22), observation("192.0.2.2", 80)],
    )
    _run_workers(settings)
    second = alice.post(f"/api/tasks/{task}/runs")
    assert second.status_code == 201, second.get_json()
    run2 = second.get_json()["run"]["id"]
    assert claim(scanner).final(0, [observation("192.0.2.1", 22)]).status_code == 200
    _run_workers(settings)
    run1 = alice.get(f"/api/tasks/{task}/runs").get_json()["items"][-1]["id"]

    # The task page counts the changes of the run its links list (the latest finished),
    # not every run's: its "gone 1" leads to a list holding that one change.
    task_page = client.get(f"/console/tasks/{task}").text
    assert "Changes in run 2 (1 analysed execution)" in task_page
    gone_link = re.search(r'<a href="([^"]+)" data-kind="gone">gone 1<', task_page)
    assert gone_link and f"run={run2}" in html.unescape(gone_link.group(1))
    listed = client.get(html.unescape(gone_link.group(1))).text
    assert listed.count('class="kind-gone"') == 1
    latest = client.get(f"/console/tasks/{task}/changes")  # the latest finished run: 2
    assert latest.status_code == 200 and ", run 2</h1>" in latest.text
    assert re.search(r'data-kind="gone">gone 1<', latest.text)
    first = client.get(f"/console/tasks/{task}/changes?run={run1}")
    assert ", run 1</h1>" in first.text and re.search(r'data-kind="new">new 2<', first.text)
    compared = client.get(f"/console/tasks/{task}/changes?from_run={run1}&to_run={run2}")
    assert compared.status_code == 200 and "run 1 → run 2" in compared.text
    assert compared.text.count('class="kind-gone"') == 1 and "192.0.2.2:80/tcp" in compared.text
    backwards = client.get(f"/console/tasks/{task}/changes?from_run={run2}&to_run={run1}")
    assert backwards.text.count('class="kind-new"') == 1
    half = client.get(f"/console/tasks/{task}/changes?from_run={run1}")
    assert half.status_code == 400


def test_a_changed_endpoint_names_its_changed_fields_on_every_change_list(api, settings) -> None:
    # A new certificate or version read "changed … open → open" on the run's changes, the
    # comparison and the feed: nothing said what differed (only the host page did).
    client, created = _user_client(api)
    alice = api.login(created["username"])
    scanner = api.scanner()
    nginx = {"name": "http", "product": "nginx", "version": "1.24"}
    task = _scan(alice, scanner, [observation("192.0.2.1", 80, service=nginx)])
    _run_workers(settings)
    second = alice.post(f"/api/tasks/{task}/runs")
    assert second.status_code == 201, second.get_json()
    run2 = second.get_json()["run"]["id"]
    newer = {**nginx, "version": "1.26"}
    assert claim(scanner).final(0, [observation("192.0.2.1", 80, service=newer)]).status_code == 200
    _run_workers(settings)
    run1 = alice.get(f"/api/tasks/{task}/runs").get_json()["items"][-1]["id"]

    compared = alice.get(f"/api/tasks/{task}/changes?from_run={run1}&to_run={run2}").get_json()
    (item,) = compared["items"]
    assert item["kind"] == "changed" and item["changed_fields"] == ["version"]
    for page in (
        f"/console/tasks/{task}/changes",
        f"/console/tasks/{task}/changes?from_run={run1}&to_run={run2}",
        f"/console/tasks/{task}/changes?from_run={run2}&to_run={run1}",
        "/console/changes",
    ):
        html = client.get(page).text
        assert '<span class="muted changed-fields">(version)</span>' in html, page

    # A certificate replaced: the fingerprints, not only the field's name ("open → open").
    for cert in ("aa" * 32, "bb" * 32):
        assert alice.post(f"/api/tasks/{task}/runs").status_code == 201
        seen = observation("192.0.2.1", 80, service=newer, tls={"sha256": cert})
        assert claim(scanner).final(0, [seen]).status_code == 200
        _run_workers(settings)
    html = client.get(f"/console/tasks/{task}/changes").text
    assert (
        '(cert_sha256: <code title="' + "aa" * 32 + '">aaaaaaaaaaaa…</code> → '
        '<code title="' + "bb" * 32 + '">bbbbbbbbbbbb…</code>)'
    ) in html

    # A run's id that is no run of the task says what run= takes.
    missing = alice.get(f"/api/tasks/{task}/changes?run=999999")
    assert missing.status_code == 404
    assert "takes a run's id, not its number" in missing.get_json()["error"]["message"]
