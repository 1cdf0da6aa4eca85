"""The alert rules' search filters on PostgreSQL (``asset_match``): a search tested against
given endpoints, as a rule tests a run's changes, finds what the same search finds on
the Assets page (free texts, short and long enough for the chunk lookup, included).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from app import db
from app.search.postgres_language import asset_match
from app.search.query_language import parse_query
from tests.integration.search.test_search_language_contract import NOW, _assets, search

QUERIES = [
    "nginx",
    "-nginx",
    "OpenSSH port:22",
    "www.example.com",  # long enough for the chunk lookup a search makes first
    "SSH-2.0-OpenSSH_9.6",
    "example.com OR transport:udp",
    "-www.example.com -port:53",
    "no-such-host.example",
]


@pytest.fixture
def owner(postgres_store) -> int:
    owner = 60_001
    docs = _assets(owner)
    assert postgres_store.publish_current(docs, max_operations=4, max_bytes=1 << 20).ok
    postgres_store.refresh_current()
    return owner


def _matched(owner: int, text: str, rows: int | None) -> list[tuple[str, int]]:
    """The published endpoints (and one that has no asset) the search matches, tested as
    the alert rules test a run's changes (``rows``: as a small change set, or unknown)."""
    condition, params = asset_match(
        parse_query(text, now=NOW).node, endpoint="x", status="t.status", rows=rows
    )
    endpoints = [(a.ip, a.port, a.transport) for a in _assets(owner)] + [("10.9.9.9", 22, "tcp")]
    values = ", ".join(f"(CAST(:ip{n} AS inet), :port{n}, :tr{n})" for n in range(len(endpoints)))
    for n, (ip, port, transport) in enumerate(endpoints):
        params |= {f"ip{n}": ip, f"port{n}": port, f"tr{n}": transport}
    sql = (
        f"SELECT host(x.ip) AS ip, x.port FROM (VALUES {values}) AS x(ip, port, transport) "
        f"WHERE {condition}"
    )
    with db.transaction() as conn:
        rows = conn.execute(sa.text(sql), {**params, "owner_id": owner}).all()
    return sorted((r.ip, r.port) for r in rows)


@pytest.mark.parametrize("rows", [10, None])
@pytest.mark.parametrize("text", QUERIES)
def test_a_search_tested_on_given_endpoints_finds_what_the_search_finds(
    postgres_store, owner, text, rows
):
    assert _matched(owner, text, rows) == search(postgres_store, owner, text)
