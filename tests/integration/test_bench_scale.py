"""`netmap bench scale` runs end to end as a real process at two small sizes (no timing
asserted): one scratch database grown through the real upload path, every measure of
every step present and of the documented kind, and the plot a PNG."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from app.bench.disk import read_disk
from app.bench.scale import PORTS, flat_measures, observations, parse_steps
from tests.support.processes import run_bench

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

PROBE_MEASURES = (
    "upload_500_p95_ms",
    "final_ms",
    "projection_endpoints_per_s",
    "analysis_ms",
    "analysis_endpoints_per_s",
    "export_rows_per_s",
    "report_capture_hold_p95_ms",
    "results_page_p95_ms",
    "search_max_p95_ms",
    "facets_max_p95_ms",
    "upload_500_cpu_ms",
    "final_cpu_ms",
    "projection_cpu_ms_per_1k",
    "analysis_cpu_ms",
    "export_cpu_ms_per_1k_rows",
    "report_capture_cpu_ms",
    "results_page_cpu_ms",
    "results_page_request_cpu_ms",
    "results_page_thread_cpu_ms",
    "search_cpu_ms",
    "vacuum_analyze_ms",
    "checkpoint_ms",
)


@pytest.mark.slow
def test_bench_scale_grows_one_database_and_measures_every_step(tmp_path):
    png = tmp_path / "scale.png"
    report = run_bench(
        "scale", "--endpoints", "4000", "--steps", "2000", "--probe", "1000",
        "--repeats", "3", "--captures", "2", "--shared-buffers", "64MB", "--plot", str(png),
        scratch_on_disk=True,  # the disk counters need a block device under the scratch
    )  # fmt: skip
    assert report["benchmark"] == "scale" and report["probe_endpoints"] == 1000
    steps = report["steps"]
    has_device = read_disk(Path(tempfile.gettempdir())) is not None  # where scratches go
    assert [step["endpoints"] for step in steps] == [2000, 4000]
    for step in steps:
        # The database holds exactly the step's endpoints, all of them current assets.
        assert step["assets"] == step["endpoints"] and step["assets_gone"] == 0
        assert step["fill"]["endpoints"] == 1000  # the step less the probe and what was there
        for key in PROBE_MEASURES:
            assert step[key] > 0, key
        assert step["export_rows"] == 1000
        assert set(step["search"]) == {
            "port_p95_ms", "service_p95_ms", "product_not_port_p95_ms", "net_p95_ms",
            "net_port_p95_ms", "free_text_p95_ms", "cert_expires_p95_ms", "cert_issuer_p95_ms",
            "cert_subject_rare_p95_ms", "title_rare_p95_ms", "last_seen_service_p95_ms",
            "or_not_p95_ms",
        }  # fmt: skip
        assert set(step["facets"]) == {"facets_all_p95_ms", "facets_port_p95_ms"}
        tables = step["table_bytes_per_million_endpoints"]
        for table in ("search_facts", "search_execution_endpoints", "search_assets_user"):
            assert tables[table] > 0, table  # fact partitions summed under their parent
        assert not any(name.startswith("search_facts_y") for name in tables)
        assert step["index_bytes_per_million_endpoints"]
        assert step["database_bytes"] > sum(tables.values()) * step["endpoints"] / 1e6 * 0.99
        assert set(step["autovacuum"]) >= {"dead_tuples", "modified_since_analyze"}
        assert step["web_rss_mb"] >= step["web_rss_max_process_mb"] > 0
        assert step["runner_rss_mb"] > 0
        # The request's own CPU is part of what every process spent meanwhile.
        assert step["results_page_thread_cpu_ms"] <= step["results_page_request_cpu_ms"]
        assert step["probe_server_background_cpu_ms"] >= 0
        # The kernel's unwritten pages were written out before the probe, and the device
        # under the scratch database says what the probe's phases read and wrote.
        assert step["unwritten_before_sync_mib"] >= 0 and step["sync_ms"] >= 0
        # (None only where the scratch's filesystem has no block device of its own.)
        assert set(step["disk"]) == {"upload", "projection"}
        if has_device:
            assert None not in step["disk"].values()
        for phase in filter(None, step["disk"].values()):
            assert phase["reads"] >= 0 and phase["writes"] >= 0 and phase["write_mib"] >= 0
        # How much of the value keys the projection found in shared buffers.
        resident = step["value_keys_resident_at_projection"]
        assert set(resident) == {"search_asset_fact_texts_pkey", "search_asset_texts_pkey"}
        assert all(0 <= key["resident"] <= key["blocks"] for key in resident.values())
        assert resident["search_asset_fact_texts_pkey"]["blocks"] > 1  # certificate values
        # Where the probe's writes went, from the server's statement counters: the
        # upload's costliest statement is one of its COPYs, each call a whole batch.
        upload, projection = step["statements"]["upload"], step["statements"]["projection"]
        assert upload["buffers_per_endpoint"] > 0 and projection["buffers_per_endpoint"] > 0
        assert upload["top"][0]["query"].startswith("COPY search_")
        assert upload["top"][0]["rows_per_call"] == 500
        # Both of the batch's COPYs fall inside the upload's window.
        copied = {entry["query"].split(" (")[0] for entry in upload["top"]}
        assert {"COPY search_facts", "COPY search_execution_endpoints"} <= copied
        # Which relations gave them their pages (pg_statio): the upload's COPYs touched
        # the facts and the execution endpoints, the projection the asset views.
        relations = step["relations"]
        assert {"search_facts", "search_execution_endpoints"} <= set(relations["upload"]["tables"])
        assert "search_assets_user" in relations["projection"]["tables"]
        for phase in relations.values():
            assert phase["touched_per_1k"] >= phase["read_per_1k"] >= 0
            by_table = phase["tables"].values()
            assert abs(sum(t["touched_per_1k"] for t in by_table) - phase["touched_per_1k"]) < 1
            assert phase["top"] and all(e["touched_per_1k"] > 0 for e in phase["top"])
            assert isinstance(phase["maintained"], list)
        # And each search query's: every run made statements, which touched buffers.
        work = step["search_statements"]
        assert set(work) == {name[: -len("_p95_ms")] for name in (*step["search"], *step["facets"])}
        assert all(entry["buffers_per_endpoint"] > 0 and entry["top"] for entry in work.values())
        # Every latency and rate follows the naming rule, so the plot finds them all.
        measures = flat_measures(step)
        assert all(value >= 0 for value in measures.values())
        assert "fill.endpoints_per_s" in measures and "search.port_p95_ms" in measures
    assert png.read_bytes()[:8] == PNG_SIGNATURE


def test_steps_parse_counts_and_end_at_endpoints():
    assert parse_steps("1e5, 3e5", 1_000_000) == [100_000, 300_000, 1_000_000]
    assert parse_steps(None, 4000) == [4000]
    assert parse_steps("4000,2000", 4000) == [2000, 4000]


@pytest.mark.parametrize("steps", ["2e6", "1.5", "zero", "0", "1001"])
def test_steps_outside_endpoints_or_not_counts_are_refused(steps):
    import click

    with pytest.raises(click.BadParameter):
        parse_steps(steps, 1_000_000)


def test_targets_are_exactly_the_hosts_of_a_range():
    from app.bench.scale import targets

    assert targets(0, 5) == ["10.0.0.0/32"]
    assert targets(5, 15) == ["10.0.0.1/32", "10.0.0.2/31"]
    assert targets(0, 5 * 512) == ["10.0.0.0/23"]


def test_bad_steps_answer_a_usage_error_not_a_traceback():
    process = run_bench("scale", "--endpoints", "1000", "--steps", "5000", check=False)
    assert process.returncode == 2 and "--steps" in process.stderr
    assert "Traceback" not in process.stderr


def test_observations_are_distinct_endpoints_with_five_services_per_address():
    from datetime import UTC, datetime

    items = observations(0, 10, "2026-12-01T00:00:00+00:00", datetime(2026, 12, 1, tzinfo=UTC))
    assert len({(i["ip"], i["port"]) for i in items}) == 10
    assert [i["port"] for i in items[:5]] == list(PORTS)
    assert items[0]["ip"] == items[4]["ip"] != items[5]["ip"]
    assert [i["tls"]["subject_cn"] for i in items if i["port"] == 443] == [
        items[2]["ip"], items[7]["ip"],
    ]  # fmt: skip
