"""The collector settings of the long-running processes (app.heap)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.processes import PROJECT_ROOT

_REPORT = (
    "import gc, json\n"
    "print(json.dumps({'frozen': gc.get_freeze_count(), 'threshold': gc.get_threshold()}))\n"
)


def _run(script: str, tmp_path) -> dict:
    # A fresh interpreter: gc settings are process-wide, the test process keeps its own.
    done = subprocess.run(
        [sys.executable, "-c", script + _REPORT],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_settle_heap_freezes_what_is_alive_and_raises_the_young_threshold(tmp_path):
    from app.heap import MIDDLE_THRESHOLD, OLD_THRESHOLD, YOUNG_THRESHOLD

    before = _run("import app.heap\n", tmp_path)
    assert before["frozen"] == 0 and before["threshold"][0] == 700  # CPython's defaults
    after = _run("import app.heap\napp.heap.settle_heap()\n", tmp_path)
    assert after["frozen"] > 1000  # the modules, classes and functions loaded so far
    assert after["threshold"] == [YOUNG_THRESHOLD, MIDDLE_THRESHOLD, OLD_THRESHOLD]


def test_a_booted_web_worker_settles_its_heap(tmp_path):
    # gunicorn calls post_worker_init in the worker once the app is loaded.
    report = _run(
        "import app.gunicorn_conf as conf\nconf.post_worker_init(None)\nconf.on_exit(None)\n",
        tmp_path,
    )
    assert report["frozen"] > 1000
    assert report["threshold"][0] > 700
