"""GET /metrics on a live `netmap up` while metric files are being created.

Every process that records a metric (a web worker, the runner and its workers)
creates its own file in PROMETHEUS_MULTIPROC_DIR the first time, and for a moment
that file is empty; a process killed at that moment leaves it empty for good. The
scrape used to read every file with prometheus_client and answered 500 on such a file
(found by schemathesis on a busy host). It now leaves the file out until it reads whole.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.database import unique_name
from tests.support.netmap_server import netmap_server

pytestmark = pytest.mark.e2e

# Not a pid a live process can have (above the kernel's largest pid_max).
NO_PROCESS = 4194399


def _record_counter(metrics_dir, value: int) -> None:
    """A separate process records a counter with the real client, as a runner worker does."""
    code = (
        "from prometheus_client import Counter\n"
        f"Counter('netmap_scrape_probe', 'probe', registry=None).inc({value})\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        env={"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir), "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=60,
    )


def test_a_metric_file_being_created_or_left_empty_does_not_fail_the_scrape(
    pg_server, template_db, tmp_path
):
    name = unique_name("netmap_metrics")
    url = pg_server.create_database(name, template_db)
    try:
        with netmap_server(url, tmp_path) as server:
            metrics_dir = tmp_path / "var" / "run" / "prometheus"
            assert server.get("/metrics").status_code == 200
            # The state of a file between its process's open() and its sizing, or of one
            # whose process was killed right there.
            (metrics_dir / f"counter_{NO_PROCESS}.db").write_bytes(b"")
            (metrics_dir / f"histogram_{NO_PROCESS}.db").write_bytes(b"\x10\x00")
            for _ in range(3):
                scraped = server.get("/metrics")
                assert scraped.status_code == 200, scraped.text
                assert "netmap_http_request_duration_seconds_bucket" in scraped.text
            # A file whose entries run past its header's length: left out, and said so.
            corrupt = bytearray(64)
            corrupt[0:4] = (24).to_bytes(4, "little")
            corrupt[8:12] = (1000).to_bytes(4, "little")
            (metrics_dir / f"gauge_all_{NO_PROCESS}.db").write_bytes(bytes(corrupt))
            scraped = server.get("/metrics")
            assert scraped.status_code == 200, scraped.text
            skipped = [
                json.loads(line)
                for line in server.process.stderr().splitlines()
                if '"MetricsFileSkipped"' in line
            ]
            assert {(e["file"], e["reason"]) for e in skipped} >= {
                (f"gauge_all_{NO_PROCESS}.db", "corrupt")
            }

            # Once another process's file is whole, its samples are in the next scrape.
            _record_counter(metrics_dir, 3)
            scraped = server.get("/metrics")
            assert scraped.status_code == 200, scraped.text
            assert "netmap_scrape_probe_total 3.0" in scraped.text
            assert "Traceback" not in server.process.stderr()
    finally:
        pg_server.drop_database(name)
