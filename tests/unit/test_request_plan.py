"""ING-9: refresh/count request lines stay within the budget, at and around the boundary."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.search.port import RequestLineTooLong
from app.search.request_plan import plan_final_requests, request_line_bytes, url_path_prefix

ENDPOINTS = "netmap-execution-endpoints"
LIMIT = 3072


def name_with_refresh_line(total: int) -> str:
    """An index name whose lone refresh request line is exactly ``total`` bytes."""
    overhead = request_line_bytes("POST", [""], "_refresh")
    return "f" * (total - overhead)


def check_invariants(requests, names, limit=LIMIT):
    for request in requests:
        assert request.line_bytes == len(request.line.encode("utf-8"))
        assert request.line_bytes <= limit
        assert request.line.endswith(" HTTP/1.1") and request.line.startswith("POST /")
    # Greedy: the first index of each later chunk did not fit the chunk before it.
    for before, after in itertools.pairwise(requests):
        joined = [*before.indices, after.indices[0]]
        assert request_line_bytes("POST", joined, before.endpoint, before.query) > limit
    covered = [name for request in requests for name in request.indices]
    assert covered == names


def test_exactly_at_the_budget_fits_alone():
    name = name_with_refresh_line(LIMIT)
    assert request_line_bytes("POST", [name], "_refresh") == LIMIT
    planned = plan_final_requests([name], endpoint_index=ENDPOINTS)
    # The endpoint index cannot share the line, so it gets its own request first.
    assert [r.indices for r in planned.refreshes] == [(ENDPOINTS,), (name,)]
    assert [r.line_bytes for r in planned.refreshes][1] == LIMIT
    assert [r.indices for r in planned.counts] == [(name,)]
    assert planned.plan.max_request_line_bytes == LIMIT


def test_one_byte_over_the_budget_is_rejected_before_anything_is_sent():
    name = name_with_refresh_line(LIMIT + 1)
    with pytest.raises(RequestLineTooLong) as caught:
        plan_final_requests(["netmap-facts-2026.11", name], endpoint_index=ENDPOINTS)
    assert (caught.value.index, caught.value.size, caught.value.limit) == (name, LIMIT + 1, LIMIT)


def test_a_count_line_at_the_budget_still_needs_a_refresh_line_that_fits():
    # "_count" is two bytes shorter than "_refresh": this name's count line is 3071.
    name = name_with_refresh_line(LIMIT + 1)
    assert request_line_bytes("POST", [name], "_count") == LIMIT - 1
    with pytest.raises(RequestLineTooLong):
        plan_final_requests([name], endpoint_index=ENDPOINTS)


def test_one_huge_name_is_rejected():
    huge = "netmap-facts-" + "x" * 5000
    with pytest.raises(RequestLineTooLong) as caught:
        plan_final_requests([huge], endpoint_index=ENDPOINTS)
    assert caught.value.index == huge and caught.value.size > 5000


def test_an_endpoint_index_that_cannot_fit_is_rejected():
    with pytest.raises(RequestLineTooLong):
        plan_final_requests([], endpoint_index="e" * 4000)


def test_many_short_names_are_chunked_in_order_and_refresh_endpoints_once():
    names = [
        f"netmap-facts-{year:04d}.{month:02d}"
        for year in range(1990, 2040)
        for month in range(1, 13)
    ]
    planned = plan_final_requests(list(reversed(names)) + names[:50], endpoint_index=ENDPOINTS)
    assert len(planned.refreshes) > 1 and len(planned.counts) > 1
    assert planned.refreshes[0].indices[0] == ENDPOINTS
    refreshed = [n for r in planned.refreshes for n in r.indices]
    assert refreshed.count(ENDPOINTS) == 1
    check_invariants(planned.refreshes, [ENDPOINTS, *names])
    check_invariants(planned.counts, names)
    assert planned.plan.refresh_requests == len(planned.refreshes)
    assert planned.plan.count_requests == len(planned.counts)
    assert planned.plan.max_request_line_bytes <= LIMIT


def test_a_few_months_make_one_refresh_and_one_count():
    planned = plan_final_requests(
        ["netmap-facts-2026.11", "netmap-facts-2026.10", "netmap-facts-2026.11"],
        endpoint_index=ENDPOINTS,
    )
    assert [r.indices for r in planned.refreshes] == [
        (ENDPOINTS, "netmap-facts-2026.10", "netmap-facts-2026.11")
    ]
    assert [r.indices for r in planned.counts] == [("netmap-facts-2026.10", "netmap-facts-2026.11")]
    assert planned.refreshes[0].line == (
        "POST /netmap-execution-endpoints,netmap-facts-2026.10,netmap-facts-2026.11/_refresh"
        " HTTP/1.1"
    )


def test_an_empty_execution_refreshes_endpoints_and_counts_nothing():
    planned = plan_final_requests([], endpoint_index=ENDPOINTS)
    assert [r.indices for r in planned.refreshes] == [(ENDPOINTS,)]
    assert planned.counts == ()
    assert planned.plan.count_requests == 0


def test_encoded_bytes_are_what_counts():
    # "+" travels as %2B and "é" as %C3%A9: three and six bytes on the line, not one.
    plain = request_line_bytes("POST", ["ab"], "_count")
    assert request_line_bytes("POST", ["a+b"], "_count") == plain + 3
    assert request_line_bytes("POST", ["aéb"], "_count") == plain + 6
    assert request_line_bytes("POST", ["a*b"], "_count") == plain + 1  # wildcards stay


def test_query_strings_count_towards_the_line():
    names = [f"netmap-facts-2{n:03d}.01" for n in range(400)]
    query = "ignore_unavailable=false&allow_no_indices=false"
    planned = plan_final_requests(names, endpoint_index=ENDPOINTS, count_query=query)
    assert all(r.line.endswith(f"/_count?{query} HTTP/1.1") for r in planned.counts)
    check_invariants(planned.counts, names)


@given(
    lengths=st.lists(st.integers(1, 900), min_size=0, max_size=60),
    limit=st.integers(1000, 4096),
)
def test_chunks_always_fit_and_cover_every_name_once(lengths, limit):
    names = sorted({f"i{n:03d}-" + "x" * length for n, length in enumerate(lengths)})
    planned = plan_final_requests(names, endpoint_index=ENDPOINTS, max_line_bytes=limit)
    check_invariants(planned.refreshes, [ENDPOINTS, *names], limit)
    check_invariants(planned.counts, names, limit)


@pytest.mark.parametrize(
    ("url", "prefix"),
    [
        ("http://es:9200", ""),
        ("http://es:9200/", ""),
        ("https://proxy.example/es/", "/es"),
        ("https://proxy.example/es", "/es"),
        ("https://proxy.example/search/cluster-a/", "/search/cluster-a"),
    ],
)
def test_the_url_base_path_is_the_transports_path_prefix(url, prefix):
    assert url_path_prefix(url) == prefix


def test_a_base_path_counts_against_the_budget():
    # A cluster behind a proxy under /es/: every line the client sends starts with /es.
    name = name_with_refresh_line(LIMIT)
    assert request_line_bytes("POST", [name], "_refresh", path_prefix="/es") == LIMIT + 3
    with pytest.raises(RequestLineTooLong) as caught:
        plan_final_requests([name], endpoint_index=ENDPOINTS, path_prefix="/es")
    assert caught.value.size == LIMIT + 3
    fits = name_with_refresh_line(LIMIT - 3)
    planned = plan_final_requests([fits], endpoint_index=ENDPOINTS, path_prefix="/es")
    (_, refresh) = planned.refreshes
    assert refresh.line.startswith(f"POST /es/{fits}/_refresh") and refresh.line_bytes == LIMIT
    assert refresh.line_bytes == len(refresh.line.encode("utf-8"))


def test_many_names_behind_a_base_path_stay_within_the_budget():
    names = [
        f"netmap-facts-{year:04d}.{month:02d}" for year in range(1990, 2040) for month in (1, 7)
    ]
    planned = plan_final_requests(names, endpoint_index=ENDPOINTS, path_prefix="/es/cluster-a")
    for request in (*planned.refreshes, *planned.counts):
        assert request.line.startswith("POST /es/cluster-a/")
        assert request.line_bytes == len(request.line.encode("utf-8")) <= LIMIT
    bare = plan_final_requests(names, endpoint_index=ENDPOINTS)
    assert planned.plan.refresh_requests >= bare.plan.refresh_requests
