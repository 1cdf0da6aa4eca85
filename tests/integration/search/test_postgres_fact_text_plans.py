"""Text facts of the search language (``cert.issuer:``, ``title:`` …) on a realistic table.

Migration 1100 keeps statistics on each text fact's expression; migration 1610 keys the
certificate issuer and subject to their distinct values, with an index and statistics
on the key, and migration 1800 does the same for the HTTP title and server. These tests
plan the searches over thousands of analysed rows, with the planner free to choose: a
common issuer or server is estimated near its real count (so a first page is read in
page order, not the whole view read and sorted), a rare issuer, subject, title or
server is read through its key's index (not by scanning every certificate or page), and
rare and common values answer exactly what the condition evaluated on its own answers.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from app import db
from app.search.port import AssetQuery
from app.search.postgres_store import PostgresStore
from app.search.query_language import parse_query
from tests.support.asset_search import (
    analyse_views,
    every_page,
    search_plan,
    seed_views,
    without_indexes,
)
from tests.support.plans import nodes
from tests.support.seeded import seeded_copies

OWNER = 7
ENDPOINTS = 20_000
SERVICES = (
    (22, "ssh", "OpenSSH", "9.6p1", "SSH-2.0-OpenSSH_9.6p1"),
    (443, "https", "nginx", "1.24.0", "HTTP/1.1 200 OK"),
)
RARE_HOST = "10.0.3.7"
# A page whose server is rare, and one whose title is over the length a search reads.
RARE_SERVER_HOST = "10.0.20.2"
LONG_TITLE_HOST = "10.0.20.1"


def _certify(_store: PostgresStore) -> None:
    seed_views(OWNER, ENDPOINTS, SERVICES)
    with db.transaction() as conn:
        # Every HTTPS asset has a certificate from a common CA and a page (a title naming
        # the host, a common server); one has a rare issuer, one a rare server, one a title
        # over the length cap. The SSH assets keep no TLS or HTTP facts.
        for table in ("search_assets_user", "search_assets_global"):
            conn.execute(
                sa.text(
                    f"UPDATE {table} SET details = jsonb_build_object("
                    "'tls', jsonb_build_object('issuer', CASE WHEN host(ip) = :rare "
                    "THEN 'CN=Quokka Root,O=Marsupial' ELSE 'CN=Common CA,O=netmap' END, "
                    "'subject_cn', host(ip)), "
                    "'http', jsonb_build_object('title', CASE WHEN host(ip) = :long "
                    "THEN repeat('x', 1100) || ' Quokka Portal' ELSE 'Welcome ' || host(ip) END, "
                    "'server', CASE WHEN host(ip) = :server "
                    "THEN 'Quokka-httpd/2.0' ELSE 'nginx/1.24.0' END)) "
                    "WHERE port = 443"
                ),
                {"rare": RARE_HOST, "long": LONG_TITLE_HOST, "server": RARE_SERVER_HOST},
            )
    analyse_views()


# Seeded and analysed once per module; each test that asks for ``certified`` reads a copy.
seeded_template, database_url = seeded_copies(_certify, fixture="certified")


@pytest.fixture
def certified(postgres_store) -> None:
    """The estate ``_certify`` seeded (in this test's copy of the seeded database)."""


def _query(text: str, scope: str, **extra: Any) -> AssetQuery:
    node = parse_query(text, now=datetime(2026, 12, 2, tzinfo=UTC)).node
    owner = {"owner_id": OWNER} if scope == "user" else {}
    return AssetQuery(scope=scope, where=node, **owner, **extra)


def _without_indexes(scope: str, condition: str) -> list[tuple[str, int]]:
    return without_indexes(scope, condition, OWNER)


@pytest.mark.parametrize("scope", ["user", "global"])
def test_a_rare_issuer_is_found(postgres_store, certified, scope):
    assert every_page(postgres_store, _query('cert.issuer:"Quokka Root"', scope)) == [
        (RARE_HOST, 443)
    ]


# (query, the plain condition it means): a value a fifth of the endpoints carry.
COMMON_VALUES = [
    ('cert.issuer:"Common CA"', "details->'tls'->>'issuer' ILIKE '%Common CA%'"),
    ("server:NGINX", "details->'http'->>'server' ILIKE '%nginx%'"),
]


@pytest.mark.parametrize("scope", ["user", "global"])
@pytest.mark.parametrize(("text", "plain"), COMMON_VALUES, ids=["issuer", "server"])
def test_a_common_value_is_estimated_near_its_count(postgres_store, certified, scope, text, plain):
    common = ENDPOINTS // len(SERVICES) - 1
    plan = search_plan(_query(text, scope, limit=50))
    scans = [n for n in nodes(plan) if "Scan" in n["Node Type"]]
    # Guessed at a handful of rows, the page would be a full read and sort of the view;
    # estimated near its count, it is read in the order index and stops after a page.
    assert scans[-1]["Plan Rows"] >= common / 10, plan
    assert not [n for n in nodes(plan) if n["Node Type"] == "Sort"], plan
    found = every_page(postgres_store, _query(text, scope))
    assert found == _without_indexes(scope, plain)
    assert len(found) == common


# (query, index suffix, details section, key, value as the plain condition reads it)
RARE_VALUES = [
    ('cert.issuer:"Quokka Root"', "cert_issuer", "tls", "issuer", "Quokka Root"),
    (f'cert.subject:"{RARE_HOST}"', "cert_subject", "tls", "subject_cn", RARE_HOST),
    (f'title:"welcome {RARE_HOST}"', "http_title", "http", "title", f"welcome {RARE_HOST}"),
    ("server:quokka-HTTPD", "http_server", "http", "server", "quokka-HTTPD"),
]


@pytest.mark.parametrize("scope", ["user", "global"])
@pytest.mark.parametrize(("text", "index", "section", "key", "value"), RARE_VALUES)
def test_a_rare_text_fact_is_read_through_its_key_index(
    postgres_store, certified, scope, text, index, section, key, value
):
    plan = search_plan(_query(text, scope, limit=50))
    used = {n.get("Index Name") for n in nodes(plan)}
    assert f"ix_search_assets_{scope}_{index}" in used, plan
    found = every_page(postgres_store, _query(text, scope))
    assert found
    assert found == _without_indexes(scope, f"details->'{section}'->>'{key}' ILIKE '%{value}%'")


def test_values_no_certificate_has_find_nothing_and_their_negation_everything(
    postgres_store, certified
):
    assert every_page(postgres_store, _query('cert.issuer:"Wombat"', "user")) == []
    everything = every_page(postgres_store, _query('-cert.subject:"Wombat"', "user"))
    assert len(everything) == ENDPOINTS


def test_titles_and_negations_answer_as_the_plain_condition(postgres_store, certified):
    assert every_page(
        postgres_store, _query('title:"Welcome 10.0.3."', "user")
    ) == _without_indexes("user", "details->'http'->>'title' ILIKE '%Welcome 10.0.3.%'")
    # Assets with no TLS facts are outside the index and still match the negation.
    negated = every_page(postgres_store, _query('-cert.issuer:"Common CA"', "user"))
    assert len(negated) == ENDPOINTS - (ENDPOINTS // len(SERVICES) - 1)
    assert (RARE_HOST, 443) in negated


# The plain condition of each HTTP field: the expression the search language reads
# (a string of at most 1024 characters), evaluated with no index at all.
_TITLE = (
    "(CASE WHEN jsonb_typeof(details->'http'->'title') = 'string' AND "
    "length(details->'http'->>'title') <= 1024 THEN details->'http'->>'title' END)"
)
_SERVER = "(details->'http'->>'server')"


@pytest.mark.parametrize(
    ("text", "condition"),
    [
        # More than a thousand matching titles: the expression's own ILIKE decides.
        ('title:"Welcome 10.0."', f"{_TITLE} ILIKE '%Welcome 10.0.%'"),
        (f'-title:"Welcome {RARE_HOST}"', f"({_TITLE} ILIKE '%Welcome {RARE_HOST}%') IS NOT TRUE"),
        ("-server:nginx", f"({_SERVER} ILIKE '%nginx%') IS NOT TRUE"),
        ("-server:quokka", f"({_SERVER} ILIKE '%quokka%') IS NOT TRUE"),
        # A wildcard of LIKE is a plain character in the language.
        ('title:"Welcome 10.0.3_7"', "FALSE"),
        ("server:%", "FALSE"),
        # A title over the length cap reads as absent: found by no search, by every negation.
        ('title:"Quokka Portal"', "FALSE"),
        ('-title:"Quokka Portal"', "TRUE"),
        ("-title:x", f"({_TITLE} ILIKE '%x%') IS NOT TRUE"),
    ],
)
def test_http_values_answer_as_the_plain_condition(postgres_store, certified, text, condition):
    for scope in ("user", "global"):
        found = every_page(postgres_store, _query(text, scope))
        assert found == _without_indexes(scope, condition), (text, scope)


def test_a_title_over_the_length_cap_is_absent(postgres_store, certified):
    # The page carries it (the raw JSON finds it) and no search reads it.
    raw = "details->'http'->>'title' ILIKE '%Quokka Portal%'"
    assert _without_indexes("user", raw) == [(LONG_TITLE_HOST, 443)]
    assert every_page(postgres_store, _query('title:"Quokka Portal"', "user")) == []
    assert (LONG_TITLE_HOST, 443) in every_page(
        postgres_store, _query('-title:"Quokka Portal"', "user")
    )
