"""The agent's own check of what a server asks it to scan (AGT-1, SCN-7).

The agent does not scan whatever it is told: an execution's targets and ports
go through the server's own rules (``app.target_rules``, importable
without the server stack) with the agent's ``[scan]`` settings — so the
special-use policy (loopback, link-local, cloud metadata refused unless
allowed) holds on the scan host too — and, when ``[agent] allowed_networks``
is set, every address target must lie inside one of those networks: nothing
outside is ever scanned, whatever the server says. A refused execution is
reported to the server with ``fail`` and the reason; nothing is scanned.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

from app.config import ScanSettings
from app.target_rules import format_ports, parse_ports, parse_targets


class TargetRefused(Exception):
    """The execution's targets or ports break the agent's rules; the message says which."""


@dataclass(frozen=True)
class CheckedExecution:
    targets: list[str]
    ports: str


def parse_allowlist(raw: Iterable[str]) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """``[agent] allowed_networks`` as networks; ValueError names the first bad entry."""
    networks = []
    for item in raw:
        try:
            networks.append(ipaddress.ip_network(item.strip(), strict=False))
        except ValueError as exc:
            raise ValueError(f"{item!r} is not a network (CIDR): {exc}") from None
    return networks


def check_execution(
    kind: str,
    targets: list[str],
    ports: str,
    scan: ScanSettings,
    allowed_networks: Iterable[str] = (),
) -> CheckedExecution:
    """Normalised targets and ports of an execution, or TargetRefused."""
    if not targets:
        return CheckedExecution([], ports)
    parsed, problems = parse_targets(targets, scan)
    if problems:
        first = problems[0]
        where = f"target {first.index}" if first.index is not None else "targets"
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise TargetRefused(f"{where} {first.value!r:.80}: {first.reason}{more}")
    allowlist = parse_allowlist(allowed_networks)
    if allowlist and kind == "ports":
        if parsed.domains:
            raise TargetRefused(
                f"target {parsed.domains[0]!r} is a name; [agent] allowed_networks admits "
                "addresses inside its networks only"
            )
        for network in parsed.networks:
            if not any(
                network.version == allowed.version and network.subnet_of(allowed)  # type: ignore[arg-type]
                for allowed in allowlist
            ):
                raise TargetRefused(
                    f"target {network} is outside [agent] allowed_networks "
                    f"({', '.join(str(n) for n in allowlist)})"
                )
    checked_ports = ports
    if kind == "ports" and ports.strip():
        ranges, port_problems = parse_ports(ports, scan)
        if port_problems:
            first = port_problems[0]
            raise TargetRefused(f"ports {first.value!r:.80}: {first.reason}")
        checked_ports = format_ports(ranges)
    return CheckedExecution(parsed.normalised, checked_ports)
