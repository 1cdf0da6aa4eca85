"""The README's ten-minute walkthrough, pasted as written, against a live `netmap up`.

The blocks of "The first ten minutes" after `make up` run in one bash session, in
order, with `set -euo pipefail`: only the server's URL and password (printed by
`netmap up`) and the listener's port (a free one) are filled in, as a reader would.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.netmap_server import ADMIN_PASSWORD, netmap_server
from tests.support.processes import PROJECT_ROOT, base_env, free_port

pytestmark = pytest.mark.e2e

SIGN_IN_LINE = "export NETMAP=http://127.0.0.1:8000 PASSWORD='the password make up printed'"
PATH_LINE = 'export PATH="$PWD/.venv/bin:$PATH"'


def walkthrough_blocks() -> list[str]:
    text = (PROJECT_ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## The first ten minutes", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.S)
    assert blocks[0].strip() == "make up", blocks[0]
    return blocks[1:]


def test_the_walkthrough_names_every_step():
    script = "\n".join(walkthrough_blocks())
    for needed in (
        SIGN_IN_LINE,
        PATH_LINE,
        "/api/auth/login",
        '"csrf_token"',
        "X-CSRF-Token",
        "/api/scanners",
        "/api/tasks",
        "netmap agent --server",
        "/results",
        "/changes",
        "/api/reports/definitions",
        "/exports",
        "/api/alerts/rules",
        "/runs",
    ):
        assert needed in script, needed


def test_the_walkthrough_runs_as_written(database_url, tmp_path):
    script = "\n".join(walkthrough_blocks())
    port = free_port()
    work = tmp_path / "reader"
    work.mkdir()
    with netmap_server(database_url, tmp_path / "server") as server:
        filled = script.replace(
            SIGN_IN_LINE, f"export NETMAP={server.url} PASSWORD='{ADMIN_PASSWORD}'"
        )
        # The checkout's .venv in the README; here the interpreter running the tests.
        filled = filled.replace(PATH_LINE, f'export PATH="{Path(sys.executable).parent}:$PATH"')
        filled = filled.replace("8181", str(port))
        # A reader's second terminal: none of the suite's settings, in particular not
        # its loopback permission (the server has it, as `make up` gives it); the
        # README's own lines must allow the agent's scan of 127.0.0.1.
        reader = base_env()
        del reader["NETMAP_SCAN_SPECIAL_USE_TARGETS"]
        done = subprocess.run(
            ["bash", "-c", "set -euo pipefail\n" + filled],
            cwd=work,
            env=reader,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    assert f'"port": {port}' in done.stdout  # step 6: the listener is in the results
    assert '"new": 1' in done.stdout  # step 7: and it is new
    assert "\nready [netmap] first report" in done.stdout  # step 8: the report is ready
    assert (work / "report.html").read_text().lower().startswith(("<!doctype", "<html"))
    rows = (work / "export.csv").read_text().splitlines()
    assert rows[0].startswith("task_id,") and f",127.0.0.1,{port},tcp,open" in rows[1]
    assert "'gone': 1" in done.stdout  # step 11: run 2 finds the listener gone
    assert "[('netmap.change.gone', 'delivered')]" in done.stdout  # and says so
    assert list((tmp_path / "server").rglob("outbox/*.eml"))


def test_the_walkthroughs_wait_gives_up_with_a_message_instead_of_hanging():
    """A scan that fails never gets analysed: the README's waits must end and say so."""
    sign_in = walkthrough_blocks()[0]
    json_line = re.search(r"^json\(\) \{.*\}$", sign_in, flags=re.M)[0]
    wait_for = re.search(r"^wait_for\(\) \{.*?^\}$", sign_in, flags=re.M | re.S)[0]
    helpers = json_line + "\n" + wait_for
    # The server's answer never meets the condition; `seq` and `sleep` are shortened.
    stubs = 'api() { echo \'{"counts": {"analysed_executions": 0}}\'; }\n'
    stubs += "seq() { command seq 3; }\nsleep() { :; }\n"
    done = subprocess.run(
        [
            "bash",
            "-c",
            "set -euo pipefail\n"
            + helpers
            + "\n"
            + stubs
            + 'wait_for http://x/changes \'d["counts"]["analysed_executions"] > 0\'\n'
            + "echo not reached",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 1
    assert "not reached" not in done.stdout
    assert "not yet after two minutes" in done.stderr and "http://x/changes" in done.stderr
    met = subprocess.run(
        ["bash", "-c", helpers + "\napi() { echo '{\"n\": 1}'; }\nwait_for u 'd[\"n\"] > 0'"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert met.returncode == 0 and not met.stderr
