"""Exports of an asset search given as ``GET /api/assets`` parameters: ``POST /api/exports
{"filters": {…}}`` and the console's Assets page "Export" form.

The runner builds the export's query with the function the Assets page and the API use
(``app.search.asset_params``), so the file must hold the page's rows in the page's order.
"""

from __future__ import annotations

import csv
import html
import io
import json
import re
import zipfile
from urllib.parse import urlencode

from tests.integration.analysis.test_analysis_api import _run_workers, _scan
from tests.integration.exports.test_exports import _build_all, _download, _export_count
from tests.integration.exports.test_query_exports import _assets
from tests.integration.web.test_console_pages import _csrf, _sign_in
from tests.support.api import DEFAULT_PASSWORD
from tests.support.scanner_protocol import observation


def _listed(user, params: dict) -> list[tuple[str, int]]:
    """Every row ``GET /api/assets`` lists for ``params``, two to a page, in its order."""
    rows, cursor = [], None
    while True:
        query = {**params, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = user.get("/api/assets?" + urlencode(query)).get_json()
        rows += [(item["ip"], item["port"]) for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            return rows


def _csv_rows(data: bytes) -> list[tuple[str, int]]:
    return [(r["ip"], int(r["port"])) for r in csv.DictReader(io.StringIO(data.decode()))]


def test_a_filters_export_holds_the_rows_the_api_lists_in_its_order(api, settings):
    settings = settings.replace(exports={"page_size": 3})  # several keyset pages
    user = _assets(api)
    params = {
        "cidr": "192.0.2.0/29",  # .1-.7
        "transport": "tcp",
        "q": "service:ssh OR -ip:192.0.2.3",
        "sort": "port",
        "order": "desc",
    }
    expected = _listed(user, params)
    assert len(expected) == 13 and expected[0][1] == 443 and expected[-1][1] == 22
    created = user.post("/api/exports", json={"format": "csv", "filters": params})
    assert created.status_code == 202, created.get_json()
    export = created.get_json()["export"]
    assert (export["task_id"], export["query"], export["filters"]) == (None, "", params)
    assert _build_all(settings) == [export["id"]]
    assert _csv_rows(_download(user, export["id"])) == expected


def test_filters_and_a_query_are_anded_and_the_manifest_names_both(api, settings):
    user = _assets(api)
    body = {"format": "zip", "query": "port:443", "filters": {"port": 443, "ip": "192.0.2.5"}}
    created = user.post("/api/exports", json=body)
    assert created.status_code == 202, created.get_json()
    export = created.get_json()["export"]
    assert export["filters"] == {"ip": "192.0.2.5", "port": "443"}  # as a query string has them
    none = user.post(
        "/api/exports", json={"format": "csv", "query": "port:22", "filters": {"port": "443"}}
    ).get_json()["export"]
    assert sorted(_build_all(settings)) == sorted([export["id"], none["id"]])
    archive = zipfile.ZipFile(io.BytesIO(_download(user, export["id"])))
    assert _csv_rows(archive.read("endpoints.csv")) == [("192.0.2.5", 443)]
    manifest = json.loads(archive.read("manifest.json"))
    assert manifest["query"] == "port:443" and manifest["filters"] == export["filters"]
    assert _csv_rows(_download(user, none["id"])) == []  # port 22 and 443 at once: nothing


def test_refused_filters_are_a_4xx_naming_them_and_write_nothing(api):
    user, admin = api.user(), api.admin()
    before = _export_count()
    refusals = [
        ({"filters": {"prot": "22"}}, 400, "unknown_field", {"field": "filters.prot"}),
        ({"filters": {"port": "70000"}}, 400, "invalid_parameter", {"parameter": "port"}),
        ({"filters": {"port": True}}, 400, "validation_failed", {"field": "filters.port"}),
        ({"filters": {"cursor": "x"}}, 400, "unknown_field", {"field": "filters.cursor"}),
        ({"filters": ["port", "22"]}, 400, "validation_failed", {"field": "filters"}),
        ({"filters": {"q": "port:"}}, 400, "invalid_query", None),
        ({"filters": {"sort": "colour"}}, 400, "invalid_parameter", {"parameter": "sort"}),
        ({"filters": {"scope": "global"}}, 403, "forbidden", None),
        ({"query": 5, "filters": {}}, 400, "invalid_query", {"field": "query"}),
        # null is neither a query nor filters (left out, they choose every asset).
        ({"query": None}, 400, "invalid_query", {"field": "query"}),
        ({"filters": None}, 400, "validation_failed", {"field": "filters"}),
        # The query's own mistake names the body's field and its column.
        ({"query": "port:abc"}, 400, "invalid_query", {"field": "query", "column": 6}),
    ]
    for extra, status, code, details in refusals:
        response = user.post("/api/exports", json={"format": "csv", **extra})
        assert response.status_code == status, (extra, response.get_json())
        error = response.get_json()["error"]
        assert error["code"] == code, (extra, error)
        if details:
            assert {k: error["details"][k] for k in details} == details, (extra, error)
    assert _export_count() == before
    # An admin may export the global view, as the Assets page lets them search it.
    allowed = admin.post("/api/exports", json={"format": "csv", "filters": {"scope": "global"}})
    assert allowed.status_code == 202, allowed.get_json()
    assert _export_count() == before + 1
    # The format alone (the only field the API reference requires): every asset.
    everything = user.post("/api/exports", json={"format": "csv"})
    assert everything.status_code == 202, everything.get_json()
    assert everything.get_json()["export"]["query"] == ""


def test_the_assets_page_exports_what_it_lists(api, settings):
    settings = settings.replace(exports={"page_size": 2})
    user = _assets(api)
    client = _sign_in(api, user.user["username"], DEFAULT_PASSWORD)
    params = {"cidr": "192.0.2.0/29", "port": "443", "q": "-ip:192.0.2.2", "sort": "ip"}
    page = client.get("/console/assets?" + urlencode(params))
    assert page.status_code == 200
    listed = re.findall(r'href="/console/hosts/([0-9.]+)"', page.text)
    action = html.unescape(
        re.search(
            r'<form method="post" action="([^"]+)"[^>]*id="asset-export-form"', page.text
        ).group(1)
    )
    requested = client.post(action, data={"format": "csv", "csrf_token": _csrf(page.text)})
    assert requested.status_code == 303, requested.text
    assert requested.headers["Location"] == "/console/exports"
    (export,) = user.get("/api/exports").get_json()["items"]
    assert export["filters"] == {**params, "order": "asc"}  # the page's order, named
    assert _build_all(settings) == [export["id"]]
    rows = _csv_rows(_download(user, export["id"]))
    assert rows == _listed(user, params) and len(rows) == 6
    assert [ip for ip, _ in rows] == list(dict.fromkeys(listed))

    listing = client.get("/console/exports").text
    link = re.search(r'<a href="([^"]+)" class="asset-search">([^<]*)<code>([^<]*)</code>', listing)
    assert link, listing
    assert "cidr 192.0.2.0/29" in link.group(2) and "port 443" in link.group(2)
    assert html.unescape(link.group(3)) == "-ip:192.0.2.2"
    again = client.get(html.unescape(link.group(1)))  # the link lists the same assets
    assert re.findall(r'href="/console/hosts/([0-9.]+)"', again.text) == listed


def test_the_assets_page_refuses_a_bad_export_and_offers_none_for_a_bad_search(api):
    user = _assets(api)
    client = _sign_in(api, user.user["username"], DEFAULT_PASSWORD)
    page = client.get("/console/assets?port=443")
    token = _csrf(page.text)
    before = _export_count()
    bad = client.post(
        "/console/assets/export?port=443", data={"format": "exe", "csrf_token": token}
    )
    assert bad.status_code == 400 and "format must be one of" in bad.text
    bad = client.post("/console/assets/export?port=x", data={"format": "csv", "csrf_token": token})
    assert bad.status_code == 400 and "port must be an integer" in bad.text
    assert _export_count() == before
    broken = client.get("/console/assets?port=x")
    assert broken.status_code == 400 and 'id="asset-export-form"' not in broken.text


def test_an_asset_export_says_which_assets_are_gone_and_since_when(api, settings):
    """With ``status: all`` an asset export holds open and gone assets alike: each row says
    which (``status``, ``gone_since``), in CSV and JSON lines; its times always carry
    their microseconds (one column mixed two widths)."""
    user, scanner = api.user(), api.scanner()
    _scan(user, scanner, [observation("192.0.2.1", 22), observation("192.0.2.2", 22)])
    _run_workers(settings)
    _scan(user, scanner, [observation("192.0.2.1", 22)])  # .2 has gone
    _run_workers(settings)
    listed = {i["ip"]: i for i in user.get("/api/assets?status=all").get_json()["items"]}
    assert listed["192.0.2.2"]["status"] == "gone"
    ids = [
        user.post("/api/exports", json={"format": fmt, "filters": {"status": "all"}}).get_json()[
            "export"
        ]["id"]
        for fmt in ("csv", "jsonl")
    ]
    assert sorted(_build_all(settings)) == sorted(ids)
    data = _download(user, ids[0]).decode()
    assert data.splitlines()[0].endswith(",first_seen,last_seen,status,gone_since")
    rows = {r["ip"]: r for r in csv.DictReader(io.StringIO(data))}
    assert (rows["192.0.2.1"]["status"], rows["192.0.2.1"]["gone_since"]) == ("open", "")
    assert rows["192.0.2.2"]["status"] == "gone"
    stamp = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
    for row in rows.values():
        assert stamp.match(row["first_seen"]) and stamp.match(row["last_seen"]), row
    assert stamp.match(rows["192.0.2.2"]["gone_since"])
    lines = {r["ip"]: r for r in map(json.loads, _download(user, ids[1]).decode().splitlines())}
    assert (lines["192.0.2.1"]["status"], lines["192.0.2.1"]["gone_since"]) == ("open", None)
    assert lines["192.0.2.2"]["status"] == "gone"
    assert lines["192.0.2.2"]["gone_since"] == rows["192.0.2.2"]["gone_since"]
