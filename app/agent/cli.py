"""``netmap agent`` / ``python -m app.agent``: the scanner agent's command line (AGT-1).

The scanner token comes from an environment variable (``--token-env``, default
``NETMAP_SCANNER_TOKEN``), never from the command line, where other users of
the scan host could read it in the process list.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

import click

from app.agent.events import EventLog
from app.agent.loop import Agent
from app.agent.spool import SpoolInUse, default_spool_root
from app.config import ConfigError, load_settings

KINDS = ("ports", "dns")


def _check_transport(server: str, insecure_http: bool) -> None:
    """https://, or http:// to a loopback address (a local server, a test, a tunnel);
    any other plain http:// needs --insecure-http: the bearer token would travel in clear."""
    parsed = urlsplit(server)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise click.BadParameter("must be an http(s):// URL", param_hint="--server")
    if parsed.scheme == "https" or insecure_http:
        return
    host = parsed.hostname
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise click.UsageError(
            f"--server {server} is plain http:// to a host that is not loopback: the scanner "
            "token would travel in clear; use https://, or pass --insecure-http to accept that"
        )


@click.command("agent")
@click.option("--server", required=True, help="netmap base URL, e.g. https://netmap.example")
@click.option("--token-env", default="NETMAP_SCANNER_TOKEN", show_default=True)
@click.option("--kinds", default="ports,dns", show_default=True, help="execution kinds to claim")
@click.option("--engine", type=click.Choice(["nmap", "masscan"]), default="nmap", show_default=True)
@click.option("--spool", "spool_dir", type=click.Path(file_okay=False), default=None)
@click.option("--once", is_flag=True, help="run one execution (or finish a spooled one) and exit")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text")
@click.option(
    "--insecure-http",
    is_flag=True,
    help="allow a plain http:// server that is not on loopback (the token travels in clear)",
)
@click.option(
    "--config",
    "config_path",
    envvar="NETMAP_CONFIG",
    type=click.Path(dir_okay=False),
    default=None,
    help="TOML settings file; the agent reads its [agent] section",
)
@click.pass_context
def agent(
    ctx: click.Context,
    server: str,
    token_env: str,
    kinds: str,
    engine: str,
    spool_dir: str | None,
    once: bool,
    log_format: str,
    config_path: str | None,
    insecure_http: bool = False,
) -> None:
    """Claim scan executions from a netmap server, run nmap/masscan or DNS, upload results."""
    token = os.environ.get(token_env, "").strip()
    if not token:
        raise click.UsageError(f"set the scanner token in ${token_env}")
    _check_transport(server, insecure_http)
    wanted = [k.strip() for k in kinds.split(",") if k.strip()]
    if not wanted or any(k not in KINDS for k in wanted):
        raise click.BadParameter(f"kinds are {', '.join(KINDS)}", param_hint="--kinds")
    if config_path is None and ctx.obj is not None:
        config_path = getattr(ctx.obj, "config_path", None)
    try:
        settings, _check = load_settings(config_path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    agent_settings = settings.agent
    root = Path(spool_dir or agent_settings.spool_dir or default_spool_root())
    try:
        runner = Agent(
            server=server,
            token=token,
            settings=agent_settings,
            kinds=wanted,
            engine=engine,
            spool_root=root,
            log=EventLog(log_format),
            once=once,
            scan_settings=settings.scan,
        )
    except SpoolInUse as exc:
        raise click.ClickException(str(exc)) from None
    if "ports" in wanted and engine not in runner.about["engines"]:
        # Found at start (the version probe): claiming port scans it cannot run would fail
        # each of them for good, one per claim.
        runner.spool.close()
        path = getattr(agent_settings, f"{engine}_path")
        raise click.ClickException(
            f"{engine} cannot be run ({path!r}): install it or set [agent] {engine}_path; "
            "an agent for DNS work only takes --kinds dns"
        )
    runner.install_signal_handlers()
    sys.exit(runner.run())
