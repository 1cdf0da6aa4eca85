"""The benchmarks' CPU readings (``app.bench.cpu``): what a process spent, read from /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from app.bench.cpu import own_cpu_seconds, process_tree_cpu_seconds

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")


def _burn(seconds: float) -> None:
    until = time.process_time() + seconds
    while time.process_time() < until:
        pass


def test_own_cpu_seconds_grows_with_the_work_of_that_process_alone():
    before = own_cpu_seconds(os.getpid())
    _burn(0.2)
    spent = own_cpu_seconds(os.getpid()) - before
    assert 0.15 <= spent <= 1.0
    # A child's work is not the parent's (the tree reading is what counts children).
    child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: pass"])
    try:
        tree_before = process_tree_cpu_seconds(os.getpid()) or 0.0
        own_before = own_cpu_seconds(os.getpid())
        deadline = time.monotonic() + 30  # a busy host gives the child its share slowly
        while (process_tree_cpu_seconds(os.getpid()) or 0.0) - tree_before < 0.3:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert own_cpu_seconds(os.getpid()) - own_before < 0.1
    finally:
        child.kill()
        child.wait()


def test_a_process_that_is_gone_reads_zero():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert own_cpu_seconds(child.pid) == 0.0
