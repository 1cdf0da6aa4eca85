"""What the agent reports about itself: engine versions read from ``--version`` output."""

from __future__ import annotations

import socket

from app.agent.about import detect, engine_version
from app.config import AgentSettings


def _engine(tmp_path, name: str, output: str, status: int = 0) -> str:
    script = tmp_path / name
    script.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {status}\n")
    script.chmod(0o755)
    return str(script)


def test_versions_are_read_from_what_the_engines_print(tmp_path):
    nmap = _engine(tmp_path, "nmap", "Nmap version 7.94SVN ( https://nmap.org )")
    masscan = _engine(tmp_path, "masscan", "Masscan version 1.3.2 ( https://github.com/x )")
    assert engine_version(nmap) == "7.94SVN"
    assert engine_version(masscan) == "1.3.2"


def test_missing_or_silent_engines_are_left_out(tmp_path):
    silent = _engine(tmp_path, "silent", "no idea", status=1)
    assert engine_version(str(tmp_path / "absent")) is None
    assert engine_version(silent) is None
    settings = AgentSettings().replace(
        nmap_path=_engine(tmp_path, "nmap", "Nmap version 7.93 ( https://nmap.org )"),
        masscan_path=str(tmp_path / "absent"),
    )
    about = detect(settings)
    assert about["engines"] == {"nmap": "7.93"}
    assert about["hostname"] == socket.gethostname()
    assert isinstance(about["version"], str) and about["version"]


def test_the_server_accepts_what_the_agent_detects_on_this_host():
    from app.identity.scanners import parse_agent_report

    about = detect(AgentSettings())
    report = parse_agent_report(about)
    assert report is not None
    assert (report.version, report.hostname, report.engines) == (
        about["version"],
        about["hostname"],
        about["engines"],
    )
