"""Two `netmap up` instances on one host: each samples its own processes only.

Each instance's runner samples the host every second; the web processes it reports
are those of its own web server (the master named by its ``run/web/*.pid`` file under its data
directory, and its workers), never the other instance's, which run on the same host
with the same command line.
"""

from __future__ import annotations

import psutil
import pytest

from tests.support.database import unique_name
from tests.support.netmap_server import netmap_server
from tests.support.processes import wait_for

pytestmark = pytest.mark.e2e


def _web_tree(data_dir) -> set[int]:
    (pid_file,) = (data_dir / "run" / "web").glob("*.pid")
    master = psutil.Process(int(pid_file.read_text()))
    assert "wsgi:app" in " ".join(master.cmdline())
    return {master.pid} | {child.pid for child in master.children(recursive=True)}


def _sampled_web_pids(server) -> set[int]:
    body = server.get("/api/system/resources?metric=process_rss_bytes").json()
    return {
        int(entry["process"].split(":")[1])
        for entry in body["series"]
        if (entry["process"] or "").startswith("web:")
    }


def test_each_instance_samples_only_its_own_web_processes(pg_server, template_db, tmp_path):
    names = [unique_name("netmap_ops_a"), unique_name("netmap_ops_b")]
    urls = [pg_server.create_database(name, template_db) for name in names]
    try:
        sampling = {"NETMAP_OPS_SAMPLE_SECONDS": "1"}
        with (
            netmap_server(urls[0], tmp_path / "a", **sampling) as first,
            netmap_server(urls[1], tmp_path / "b", **sampling) as second,
        ):
            trees = [_web_tree(tmp_path / "a" / "var"), _web_tree(tmp_path / "b" / "var")]
            assert not trees[0] & trees[1]
            for server, own, other in ((first, *trees), (second, *reversed(trees))):
                sampled = wait_for(
                    lambda server=server, own=own: (
                        found if (found := _sampled_web_pids(server)) >= own else None
                    ),
                    90,
                    "samples of the instance's web processes",
                )
                assert sampled == own
                assert not sampled & other
    finally:
        for name in names:
            pg_server.drop_database(name)
