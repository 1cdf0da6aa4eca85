"""The collector settings of the long-running processes (app.heap)."""

from __future__ import annotations

import json

from tests.support.processes import run_python

_REPORT = (
    "import gc, json\n"
    "print(json.dumps({'frozen': gc.get_freeze_count(), 'threshold': gc.get_threshold()}))\n"
)


def _run(script: str, tmp_path) -> dict:
    # A fresh interpreter: gc settings are process-wide, the test process keeps its own.
    stdout = run_python(script + _REPORT, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    return json.loads(stdout.splitlines()[-1])


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
