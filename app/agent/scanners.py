"""Scanner command lines and the scanner process (AGT-2, AGT-4).

nmap runs with ``-oX -`` (XML on stdout, read as a stream), ``-n -Pn`` (the
server chose the targets: no name resolution, no host discovery), the
execution's ports per transport, the configured timing and, with
``[agent] service_detection``, ``-sV``. nmap cannot mix IPv4 and IPv6 in one
run, so targets are split by family and scanned one run after the other.
masscan runs with ``-oJ -`` and ``--rate``.

The process gets its own process group (``start_new_session``), so stopping a
scan — lost lease, SIGTERM past the grace period, timeout — signals nmap and
everything it started, never the agent itself. stderr goes to a file in the
spool; its tail is the failure reason the server gets.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.agent.profiles import Profile, nmap_probe_arguments
from app.config import AgentSettings

READ_BYTES = 64 * 1024


def split_targets_by_family(targets: list[str]) -> list[tuple[int, list[str]]]:
    groups: dict[int, list[str]] = {}
    for target in targets:
        try:
            family = ipaddress.ip_network(target, strict=False).version
        except ValueError:
            family = 4  # a name: nmap resolves it itself (only -n is skipped for names)
        groups.setdefault(family, []).append(target)
    return sorted(groups.items())


def _ports_spec(ports: str, transports: list[str], prefixed: bool) -> str:
    ports = ports.replace(" ", "")
    if not prefixed:
        return ports
    return ",".join(f"{'T' if t == 'tcp' else 'U'}:{ports}" for t in transports)


def nmap_command(
    settings: AgentSettings,
    targets_file: Path,
    family: int,
    ports: str,
    transports: list[str],
    profile: Profile | None = None,
) -> list[str]:
    """The nmap command line; ``profile`` (app.agent.profiles) decides service detection and
    scripts under the agent's limits, None leaves them to ``[agent]`` settings alone."""
    command = [settings.nmap_path, "-oX", "-", "-n", "-Pn", f"-{settings.nmap_timing}"]
    if family == 6:
        command.append("-6")
    transports = [t for t in transports if t in ("tcp", "udp")] or ["tcp"]
    if "udp" in transports:
        command.append("-sU")
        if "tcp" in transports:
            command.append("-sS")
    command += nmap_probe_arguments(settings, profile)
    if tuple(settings.report_states) == ("open",):
        command.append("--open")
    command += ["-p", _ports_spec(ports, transports, prefixed=len(transports) > 1)]
    command += list(settings.nmap_extra_args)
    command += ["-iL", str(targets_file)]
    return command


def masscan_command(
    settings: AgentSettings, targets_file: Path, ports: str, transports: list[str]
) -> list[str]:
    transports = [t for t in transports if t in ("tcp", "udp")] or ["tcp"]
    spec = ",".join(
        ports.replace(" ", "") if t == "tcp" else f"U:{ports.replace(' ', '')}".replace(",", ",U:")
        for t in transports
    )
    return [
        settings.masscan_path,
        "-oJ",
        "-",
        "--rate",
        str(settings.masscan_rate),
        "-p",
        spec,
        "-iL",
        str(targets_file),
    ]


@dataclass
class ScanOutcome:
    exit_code: int
    stderr_tail: str
    stopped_because: str | None


class ScanProcess:
    """One scanner run: stdout chunks out, process-group stop from any thread."""

    def __init__(self, command: list[str], stderr_path: Path):
        self.command = command
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self._lock = threading.Lock()
        self.stopped_because: str | None = None
        try:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                start_new_session=True,
            )
        except OSError:
            self._stderr.close()
            raise

    @property
    def pid(self) -> int:
        return self.process.pid

    def chunks(self) -> Iterator[bytes]:
        assert self.process.stdout is not None
        while True:
            chunk = self.process.stdout.read1(READ_BYTES)
            if not chunk:
                return
            yield chunk

    def stop(self, reason: str, grace_seconds: float = 5.0) -> None:
        """Terminate the scanner's process group (SIGTERM, then SIGKILL after the grace)."""
        with self._lock:
            if self.stopped_because is None:
                self.stopped_because = reason
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=grace_seconds)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def finish(self) -> ScanOutcome:
        """Drain and wait; the process group is gone when this returns."""
        if self.process.stdout is not None:
            for _ in self.chunks():
                pass
            self.process.stdout.close()
        code = self.process.wait()
        self._stderr.close()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)  # anything the scanner left behind
        except (ProcessLookupError, PermissionError):
            pass
        with open(self.stderr_path, "rb") as handle:
            handle.seek(max(0, os.path.getsize(self.stderr_path) - 1500))
            tail = handle.read().decode("utf-8", "replace").strip()
        return ScanOutcome(exit_code=code, stderr_tail=tail, stopped_because=self.stopped_because)
