"""Scan profiles on the nmap command line, under the agent's own limits (issue 37)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.agent.client import Execution, MalformedClaim
from app.agent.profiles import effective_profile
from app.agent.scanners import nmap_command
from app.config import load_settings

TARGETS = Path("/spool/targets.txt")


def _agent(**values):
    settings, _ = load_settings(env={}, overrides={"agent": values})
    return settings.agent


def _command(profile: str, **settings):
    agent = _agent(**settings)
    return nmap_command(agent, TARGETS, 4, "1-1000", ["tcp"], effective_profile(profile, agent))


def _scripts(command) -> list[str]:
    return command[command.index("--script") + 1].split(",") if "--script" in command else []


def test_quick_probes_ports_only():
    command = _command("quick")
    assert "-sV" not in command and "--script" not in command


def test_standard_reads_services_certificates_titles_and_banners():
    command = _command("standard")
    assert command[command.index("-sV") + 1 : command.index("-sV") + 3] == [
        "--version-intensity",
        "2",
    ]
    assert set(_scripts(command)) == {"banner", "ssl-cert", "http-title", "http-server-header"}


def test_deep_runs_full_intensity_within_the_agents_ceiling():
    assert (
        _command("deep", version_intensity=9)[
            _command("deep", version_intensity=9).index("--version-intensity") + 1
        ]
        == "9"
    )
    capped = _command("deep")  # [agent] version_intensity defaults to 7: the ceiling
    assert capped[capped.index("--version-intensity") + 1] == "7"
    assert {"ssl-cert", "ssh-hostkey"} <= set(_scripts(capped))


def test_the_agents_limits_and_settings_still_apply():
    # max_profile: a deeper request runs at the agent's deepest profile.
    assert "ssh-hostkey" not in _scripts(_command("deep", max_profile="standard"))
    assert "-sV" not in _command("standard", max_profile="quick")
    # service_detection = true keeps -sV on even for quick, as before profiles.
    forced = _command("quick", service_detection=True, version_intensity=4)
    assert forced[forced.index("--version-intensity") + 1] == "4"
    # nmap_scripts are added to a profile that runs -sV.
    assert "ftp-anon" in _scripts(_command("standard", nmap_scripts=["ftp-anon"]))
    # An unknown profile (a newer server) runs the default.
    assert effective_profile("turbo", _agent()).name == "standard"


def test_the_claim_carries_the_profile():
    claim = {
        "id": 1,
        "task_id": 2,
        "kind": "ports",
        "claim_token": "0b5e8f0e-6f0c-4c52-9a55-3d2b8f1b7c11",
        "lease_expires_at": "x",
        "targets": ["192.0.2.1"],
        "ports": "80",
        "transports": ["tcp"],
        "attempt": 1,
        "profile": "quick",
    }
    assert Execution.from_claim(claim).profile == "quick"
    assert Execution.from_claim({**claim, "profile": None}).profile == "standard"
    with pytest.raises(MalformedClaim):
        Execution.from_claim({**claim, "profile": "../quick"})
    # Without a profile (None) the command is what [agent] settings alone say.
    assert "-sV" not in nmap_command(_agent(), TARGETS, 4, "80", ["tcp"])
