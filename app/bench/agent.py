"""`netmap bench agent`: how fast the agent reads scanner output and gets it confirmed (AGT-8).

1. Generated files of ``--hosts`` x ``--ports-per-host`` open ports: nmap XML
   shaped like ``-sV`` output (service, CPE, a script) and masscan ``-oJ``.
2. Parse rate: each file is parsed in a fresh process (observations per second of
   wall time and of CPU time, and that process's peak RSS); a tenth of the hosts
   is parsed too, so the RSS ratio shows whether memory grows with the file (it
   should stay flat).
3. End to end (unless ``--no-end-to-end``): the nmap file is replayed by the
   real agent loop (batches, spool writes with fsync, HTTP uploads) against
   ``netmap up --no-runner`` (gunicorn) on a scratch database, until the final
   batch is confirmed. The agent's CPU time, the time it waited for the server's
   answers (its share of the wall time) and the CPU time of the server's processes
   say which side the rate is bound by.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from app.bench import local_server
from app.bench.cpu import process_tree_cpu_seconds
from app.bench.progress import Progress

# Peak RSS from /proc/self/status (VmHWM): ru_maxrss of a process started by fork and exec
# still holds the peak of the process it was forked from (this one, with its generated
# files), so it said nothing about the parser.
_PARSE_PROBE = r"""
import json, resource, sys, time
from app.agent.json_lines import reader_for
def peak_rss_kb():
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
path, fmt = sys.argv[1], sys.argv[2]
reader = reader_for(fmt)
started = time.perf_counter()
cpu_started = time.process_time()
count = 0
with open(path, "rb") as handle:
    for _ in reader(handle):
        count += 1
seconds = time.perf_counter() - started
cpu = time.process_time() - cpu_started
print(json.dumps({"observations": count, "seconds": seconds, "cpu_seconds": cpu,
                  "max_rss_kb": peak_rss_kb()}))
"""


def _address(i: int) -> str:
    return f"10.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"


def write_nmap_xml(path: Path, hosts: int, ports: int, start: int) -> int:
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            '<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE nmaprun>\n'
            f'<nmaprun scanner="nmap" args="nmap -sV" start="{start}" version="7.93" '
            'xmloutputversion="1.05">\n'
        )
        for h in range(hosts):
            out.write(
                f'<host starttime="{start}" endtime="{start + 1}"><status state="up" '
                'reason="syn-ack" reason_ttl="0"/>\n'
                f'<address addr="{_address(h)}" addrtype="ipv4"/>\n<hostnames>\n</hostnames>\n'
                "<ports>"
            )
            for p in range(ports):
                port = 1000 + p
                out.write(
                    f'<port protocol="tcp" portid="{port}"><state state="open" reason="syn-ack" '
                    'reason_ttl="64"/><service name="http" product="nginx" version="1.22.1" '
                    'extrainfo="Ubuntu" method="probed" conf="10"><cpe>cpe:/a:igor_sysoev:nginx:'
                    '1.22.1</cpe></service><script id="http-title" output="Welcome to nginx!"/>'
                    "</port>\n"
                )
            out.write('</ports>\n<times srtt="50" rttvar="50" to="100000"/>\n</host>\n')
        out.write(
            f'<runstats><finished time="{start + 2}" exit="success"/>'
            f'<hosts up="{hosts}" down="0" total="{hosts}"/></runstats>\n</nmaprun>\n'
        )
    return path.stat().st_size


def write_masscan_json(path: Path, hosts: int, ports: int, start: int) -> int:
    with open(path, "w", encoding="utf-8") as out:
        out.write("[\n")
        first = True
        for h in range(hosts):
            for p in range(ports):
                record = (
                    f'{{   "ip": "{_address(h)}",   "timestamp": "{start}", "ports": [ '
                    f'{{"port": {1000 + p}, "proto": "tcp", "status": "open", "reason": '
                    '"syn-ack", "ttl": 64} ] }'
                )
                out.write(record if first else ",\n" + record)
                first = False
        out.write("\n]\n")
    return path.stat().st_size


def _parse(path: Path, fmt: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_PROBE, str(path), fmt],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise click.ClickException(f"parsing {fmt} failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    # CPU time as well as wall time: on a shared machine the wall rate says more about
    # the neighbours than about the parser.
    result["observations_per_second"] = round(result["observations"] / result["seconds"])
    result["observations_per_cpu_second"] = round(result["observations"] / result["cpu_seconds"])
    result["seconds"] = round(result["seconds"], 3)
    result["cpu_seconds"] = round(result["cpu_seconds"], 3)
    return result


class _EventTee:
    """The agent's JSON events, kept for the report and echoed with ``--agent-log``."""

    def __init__(self, echo: Any | None):
        self.lines: list[str] = []
        self.echo = echo

    def write(self, text: str) -> None:
        self.lines.append(text)
        if self.echo is not None:
            self.echo.write(text)

    def flush(self) -> None:
        if self.echo is not None:
            self.echo.flush()

    def last(self, event: str) -> dict[str, Any]:
        for line in reversed("".join(self.lines).splitlines()):
            if line.strip():
                record = json.loads(line)
                if record.get("event") == event:
                    return record
        return {}


def _end_to_end(
    path: Path, expected: int, batch_size: int, agent_log: bool, upload_concurrency: int | None
) -> dict[str, Any]:

    from app.agent.events import EventLog
    from app.agent.loop import Agent
    from app.agent.nmap_xml import read_nmap_xml
    from app.bench.counts import confirmed_observations
    from app.bench.scratch import scratch_database
    from app.db import transaction
    from app.identity.scanners import create_scanner
    from app.identity.users import create_user
    from app.scan_control.creation import create_task, validate_task_request
    from app.search import open_store

    max_batch = max(5000, batch_size)
    overrides: dict[str, dict[str, object]] = {
        "ingest": {"max_observations_per_batch": max_batch},
        "agent": {"batch_size": batch_size}
        | ({} if upload_concurrency is None else {"upload_concurrency": upload_concurrency}),
        # One execution covers every generated host (10.0.0.0/16), since uploads must stay
        # inside their execution's targets.
        "scan": {"execution_lease_seconds": 600, "execution_max_addresses": 65536},
    }
    with scratch_database(overrides=overrides) as scratch:
        settings = scratch.settings
        store = open_store(settings)
        store.ensure_schema()
        store.close()
        with transaction() as conn:
            owner = create_user(conn, "bench", secrets.token_urlsafe(24), is_admin=True)
            _, token = create_scanner(conn, "bench-agent")
            request = validate_task_request(
                {"name": "bench", "targets": ["10.0.0.0/16"], "ports": "1-65535"}, settings.scan
            )
            create_task(conn, owner_id=owner.id, request=request, limits=settings.scan)
        # The server is `netmap up` (gunicorn) in its own processes, as in production: the
        # agent's parse and the server's ingest do not share one interpreter.
        env = local_server.server_environment(scratch, max_batch=max_batch, lease_seconds=600)
        server, url = local_server.start_server(scratch, env, timeout=120)
        try:
            progress = Progress("agent end-to-end", expected)

            def replay(_execution):
                with open(path, "rb") as handle:
                    for item in read_nmap_xml(handle):
                        progress.advance()
                        yield item

            events = _EventTee(sys.stderr if agent_log else None)
            with tempfile.TemporaryDirectory(prefix="netmap-bench-spool-") as spool:
                agent = Agent(
                    server=url,
                    token=token,
                    settings=settings.agent,
                    kinds=["ports"],
                    spool_root=Path(spool),
                    log=EventLog("json", stream=events),  # type: ignore[arg-type]
                    once=True,
                    observation_source=replay,
                )
                server_cpu_before = process_tree_cpu_seconds(server.pid)
                started = time.perf_counter()
                cpu_started = time.process_time()
                status = agent.run()
                seconds = time.perf_counter() - started
                agent_cpu = time.process_time() - cpu_started
                server_cpu_after = process_tree_cpu_seconds(server.pid)
            progress.finish()
            if status != 0:
                raise click.ClickException(f"the agent ended with status {status}")
            with transaction() as conn:
                confirmed = confirmed_observations(conn)
        finally:
            local_server.stop_server(server)
    wait = events.last("AgentExecutionSucceeded").get("upload_wait_seconds")
    server_cpu = (
        round(server_cpu_after - server_cpu_before, 3)
        if server_cpu_before is not None and server_cpu_after is not None
        else None
    )
    return {
        "observations": expected,
        "confirmed_observations": confirmed,
        "batch_size": batch_size,
        "upload_concurrency": settings.agent.upload_concurrency,
        "server": "netmap up --no-runner (gunicorn) on a scratch database",
        "seconds": round(seconds, 3),
        "observations_per_second": round(expected / seconds),
        # The agent process: parse, batch encoding, checksum, spool and HTTP client.
        "agent_cpu_seconds": round(agent_cpu, 3),
        # Time the agent waited for the server's answers, and its share of the wall time.
        "upload_wait_seconds": wait,
        "server_share_of_seconds": round(wait / seconds, 3) if wait is not None else None,
        # gunicorn's processes (PostgreSQL's work for them not included).
        "server_cpu_seconds": server_cpu,
    }


@click.command("agent")
@click.option("--hosts", type=click.IntRange(1, 65536), default=1000, show_default=True)
@click.option("--ports-per-host", type=click.IntRange(1, 65535), default=100, show_default=True)
@click.option("--batch-size", type=click.IntRange(1, 100_000), default=5000, show_default=True)
@click.option(
    "--upload-concurrency",
    type=click.IntRange(1, 16),
    default=None,
    help="batches in flight at once end to end  [default: the agent's, 2]",
)
@click.option("--no-end-to-end", is_flag=True, help="parse rates only (no scratch server)")
@click.option("--agent-log", is_flag=True, help="the agent's JSON events (per batch) on stderr")
def command(
    hosts: int,
    ports_per_host: int,
    batch_size: int,
    upload_concurrency: int | None,
    no_end_to_end: bool,
    agent_log: bool,
) -> None:
    """Parse rate of nmap XML / masscan JSON and end-to-end observations/s to confirmed receipts."""
    total = hosts * ports_per_host
    start = int(time.time()) - 60
    output: dict[str, Any] = {
        "benchmark": "agent",
        "hosts": hosts,
        "ports_per_host": ports_per_host,
        "observations": total,
    }
    with tempfile.TemporaryDirectory(prefix="netmap-bench-agent-") as directory:
        root = Path(directory)
        tenth = max(1, hosts // 10)
        for fmt, writer, name in (
            ("nmap-xml", write_nmap_xml, "scan.xml"),
            ("masscan-json", write_masscan_json, "scan.json"),
        ):
            print(f"[bench agent] writing {fmt} ({total} observations)", file=sys.stderr)
            size = writer(root / name, hosts, ports_per_host, start)
            small = writer(root / f"small-{name}", tenth, ports_per_host, start)
            full = _parse(root / name, fmt)
            part = _parse(root / f"small-{name}", fmt)
            print(f"[bench agent] {fmt}: {full['observations_per_second']:,}/s", file=sys.stderr)
            output[fmt] = {
                "file_bytes": size,
                "parse": full,
                "parse_tenth_of_hosts": {**part, "file_bytes": small},
                "rss_ratio_full_vs_tenth": round(full["max_rss_kb"] / part["max_rss_kb"], 3),
            }
        if not no_end_to_end:
            output["end_to_end"] = _end_to_end(
                root / "scan.xml", total, batch_size, agent_log, upload_concurrency
            )
    click.echo(json.dumps(output))
