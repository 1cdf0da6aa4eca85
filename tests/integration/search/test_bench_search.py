"""`netmap bench search` runs end to end as a real process (no timing asserted): its own
scratch PostgreSQL, the seeded assets, with ``--hostnames`` every host named and the
rare host name searched too, and with ``--rule-changes`` each query timed as an alert
rule's search over change sets of those sizes (one below ``PER_ROW_MAX``, one above)."""

from __future__ import annotations

import json

import pytest

from tests.support.processes import run_bench


@pytest.mark.slow
def test_bench_search_with_named_hosts_times_the_rare_host_name():
    # 100,000 assets: five services on each of 20,000 hosts, 10.0.77.7 among them.
    process = run_bench(
        "search",
        "--assets",
        "100000",
        "--repeats",
        "1",
        "--hostnames",
        "--rule-changes",
        "1000,30000",
        check=False,
    )
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["benchmark"] == "search" and report["assets"] == 100_000
    assert report["named_hosts"] == 100_000
    queries = report["queries"]
    assert {"free_text_host_rare", "free_text_host_port", "cert_subject_rare"} <= set(queries)
    for timing in queries.values():
        assert timing["p95_ms"] >= timing["p50_ms"] > 0
    # The host's five endpoints (its name, not 10.0.77.70's), and of them its port 22.
    assert queries["free_text_host_rare"]["rows"] == 5
    assert queries["free_text_host_port"]["rows"] == 1
    # As alert rules: the rare host's endpoints are in every change set, and found by
    # either spelling of the rule's search.
    rules = report["rule_searches"]
    assert set(rules) == {"1000", "30000"}
    for size, run in rules.items():
        assert int(size) <= run["changes"] <= int(size) + 5
        assert run["queries"]["free_text_host_rare"]["found"] == 5
        assert run["queries"]["free_text_host_port"]["found"] == 1
        # 10.0.77.7's certificate, and any of 10.0.77.70-79's among the changes.
        assert run["queries"]["cert_subject_rare"]["found"] >= 1
        # A fifth of the changes are on port 443, and a fifth are Tomcat's: above
        # PER_ROW_MAX that common word is tested on each asset's own text, below it
        # too, and either way it finds the same fifth.
        assert run["queries"]["port"]["found"] == pytest.approx(run["changes"] / 5, rel=0.2)
        assert run["queries"]["free_text"]["found"] == pytest.approx(run["changes"] / 5, rel=0.2)


@pytest.mark.slow
def test_bench_search_runs_with_the_shared_buffers_asked_for():
    process = run_bench(
        "search", "--assets", "2000", "--repeats", "1", "--shared-buffers", "256MB", check=False
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    assert report["shared_buffers"] == "256MB"
    assert "statements" not in report


@pytest.mark.slow
def test_bench_search_reports_each_querys_statements_when_asked():
    process = run_bench("search", "--assets", "2000", "--repeats", "2", "--statements", check=False)
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(process.stdout)
    work = report["statements"]
    assert set(work) == set(report["queries"]) | set(report["facets"])
    # A port's page is one statement on the view, run once per repeat: 50 rows and one
    # more, which tells the page there is a next one.
    page = work["port"]["top"][0]
    assert (page["calls"], page["rows_per_call"]) == (2, 51)
    assert page["buffers_per_call"] > 0 and page["exec_ms_per_call"] > 0
    # Per run (``_per_endpoint`` here): all of the query's statements, the page among them.
    assert work["port"]["exec_ms_per_endpoint"] >= page["exec_ms_per_call"]
    # An issuer reads its distinct values first, then the page; the counters' own reading
    # is not among a query's statements.
    issuer = [statement["query"] for statement in work["cert_issuer"]["top"]]
    assert any("search_asset_fact_texts" in query for query in issuer)
    assert any(query.startswith("SELECT replace(t.id") for query in issuer)
    read = [entry["query"] for phase in work.values() for entry in phase["top"]]
    assert not any("pg_stat_statements" in query for query in read)


@pytest.mark.parametrize("value", ["2XB", "0MB", "big"])
def test_bench_search_refuses_a_bad_shared_buffers_size(value):
    process = run_bench("search", "--shared-buffers", value, check=False)
    assert process.returncode == 2
    assert "--shared-buffers" in process.stderr


@pytest.mark.parametrize("value", ["x", "0", "1000,2000000"])
def test_bench_search_refuses_a_bad_change_set_size(value):
    process = run_bench("search", "--rule-changes", value, check=False)
    assert process.returncode == 2
    assert "--rule-changes" in process.stderr
