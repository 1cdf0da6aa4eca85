"""Run ``netmap ARGS`` in a fresh interpreter and report which heavy packages it imported.

Cron- and agent-style commands must start fast, so tests check that they do not load
the web, chart, search or ORM stacks they do not use.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]

_PROBE = """
import json, sys
from app.cli import main
try:
    main(sys.argv[1:], prog_name="netmap")
except SystemExit:
    pass
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(HEAVY)))
print("LOADED " + json.dumps(heavy))
"""


def heavy_imports_after(
    args: list[str], *, heavy: Iterable[str], env: Mapping[str, str], timeout: float = 60
) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    """(the ``heavy`` packages loaded by ``netmap ARGS``, the finished process)."""
    code = _PROBE.replace("HEAVY", repr(json.dumps(list(heavy))))
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=PROJECT,
        env=dict(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    marker = [line for line in done.stdout.splitlines() if line.startswith("LOADED ")]
    assert marker, done.stdout + done.stderr
    return json.loads(marker[-1][len("LOADED ") :]), done
