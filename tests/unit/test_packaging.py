"""What a built package ships besides ``app`` and ``jobs``: the WSGI entry point and the
migrations (deploy/systemd installs netmap with pip, then runs ``netmap db upgrade`` and
``gunicorn … wsgi:app``; both failed on an installed package, which lacked them)."""

from __future__ import annotations

import configparser
import glob
from pathlib import Path

from app import migrations

ROOT = Path(__file__).resolve().parents[2]


def _shipped() -> set[str]:
    """The files setup.cfg's data files name (globs expanded as setuptools expands them)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    shipped: set[str] = set()
    for _target, sources in config["options.data_files"].items():
        for pattern in sources.replace("\n", ",").split(","):
            if pattern.strip():
                shipped.update(glob.glob(pattern.strip(), root_dir=ROOT))
    return shipped


def test_every_migration_and_the_wsgi_module_are_in_the_package():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert "wsgi" in config["options"]["py_modules"].split()
    needed = {"alembic.ini", "alembic/env.py", "alembic/script.py.mako"}
    needed |= {str(p.relative_to(ROOT)) for p in (ROOT / "alembic" / "versions").glob("*.py")}
    assert needed <= _shipped(), sorted(needed - _shipped())


def test_an_installed_package_finds_its_migrations_under_its_prefix(tmp_path, monkeypatch):
    """No ``alembic/`` beside ``app/`` (a wheel installs ``app`` into site-packages): the
    scripts are read from ``<prefix>/share/netmap``, where the data files go."""
    assert migrations.SCRIPTS_HOME == ROOT  # a checkout reads its own
    installed = tmp_path / "share" / "netmap" / "alembic"
    (installed / "versions").mkdir(parents=True)
    (installed / "env.py").write_text("")
    monkeypatch.setattr(migrations, "PROJECT_ROOT", tmp_path / "site-packages")
    monkeypatch.setattr("sys.prefix", str(tmp_path))
    assert migrations._scripts_home() == tmp_path / "share" / "netmap"
