"""`netmap bench agent`'s parse probe reports the parser process's own peak RSS (AGT-8).

The probe is started by fork and exec from the benchmark, whose own memory holds the
generated files: the probe's figure must not inherit that peak, or the RSS ratio of
the whole file against a tenth of it says nothing.
"""

from __future__ import annotations

from app.bench.agent import _parse, write_masscan_json


def test_the_probe_peak_rss_is_its_own_not_the_benchmarks(tmp_path):
    path = tmp_path / "scan.json"
    write_masscan_json(path, 3, 4, 1796058252)
    ballast = bytearray(512 * 1024 * 1024)  # the parent's peak: far above any probe's
    ballast[::4096] = b"x" * len(ballast[::4096])
    result = _parse(path, "masscan-json")
    del ballast
    assert result["observations"] == 12
    assert 0 < result["max_rss_kb"] < 256 * 1024
