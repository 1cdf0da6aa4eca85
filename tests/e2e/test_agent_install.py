"""The agent installs on a scan host as the README says: a wheel built by the documented
command, installed into a fresh virtual environment with only the ``agent`` extra, runs
``netmap-agent`` without the server stack (AGT-1)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv

import pytest

from tests.support.processes import PROJECT_ROOT

pytestmark = pytest.mark.e2e

CERTIFICATE_CHECK = """
import datetime
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from app.agent.certificates import certificate_facts
key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "agent.example.test")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(1).not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1)).sign(key, hashes.SHA256()))
pem = cert.public_bytes(serialization.Encoding.PEM).decode()
print(certificate_facts(pem)["subject_cn"])
"""
SERVER_DISTRIBUTIONS = ("flask", "sqlalchemy", "psycopg2-binary", "gunicorn", "elasticsearch")


def _run(args: list[str], cwd, timeout: float = 600) -> subprocess.CompletedProcess:
    # Nothing of this checkout on the path: the venv must use what it installed.
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done


def test_wheel_with_the_agent_extra_runs_the_agent_without_the_server(tmp_path):
    # A copy of the checkout: the build writes build/ and *.egg-info beside the sources.
    source = tmp_path / "source"
    shutil.copytree(
        PROJECT_ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".venv", ".git", "var", ".pytest-tmp", "build", "dist", "*.egg-info", "__pycache__"
        ),
    )
    dist = source / "dist"
    # The README's command.
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", "dist", "."], cwd=source)
    assert "warning" not in built.stderr.lower(), built.stderr[-3000:]
    wheels = list(dist.glob("netmap-*.whl"))
    assert len(wheels) == 1, wheels

    env_dir = tmp_path / "agent-venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)  # this pip installs into it: faster
    pip = [sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python")]
    pip.append("--disable-pip-version-check")
    _run([*pip, "install", "--quiet", f"{wheels[0]}[agent]"], cwd=tmp_path)

    installed = _run([*pip, "list", "--format=freeze"], cwd=tmp_path).stdout.lower()
    names = {line.split("==")[0] for line in installed.splitlines()}
    assert "netmap" in names
    assert not names & set(SERVER_DISTRIBUTIONS), sorted(names & set(SERVER_DISTRIBUTIONS))

    helped = _run([str(env_dir / "bin" / "netmap-agent"), "--help"], cwd=tmp_path, timeout=60)
    assert "--server" in helped.stdout and "--token-env" in helped.stdout
    # The modules a scan loop uses import too (nmap XML, spool, resolver), not just --help.
    _run(
        [
            str(env_dir / "bin" / "python"),
            "-c",
            "import app.agent.loop, app.agent.nmap_xml, app.agent.spool, app.agent.resolver",
        ],
        cwd=tmp_path,
        timeout=60,
    )
    # The default profile reads certificates (nmap's ssl-cert): the agent's own install
    # carries what parses them.
    read = _run([str(env_dir / "bin" / "python"), "-c", CERTIFICATE_CHECK], cwd=tmp_path)
    assert read.stdout.strip() == "agent.example.test"
