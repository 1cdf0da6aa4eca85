"""The scan plan: how a task's targets split into executions (SCN-2).

Address targets are cut into executions of at most ``execution_max_addresses``
addresses (large networks split into aligned subnets, small ones packed
together), so a scanner's unit of work and its upload size stay bounded.
Domain targets go into ``dns`` executions first; the addresses they resolve
to become a child task at the DNS execution's final upload.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from app.target_rules import IPNetwork, ParsedTargets, target_text

PLAN_VERSION = 1
DNS_DOMAINS_PER_EXECUTION = 256


@dataclass(frozen=True)
class PlannedExecution:
    kind: str  # "ports" | "dns"
    targets: tuple[str, ...]
    addresses: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "targets": list(self.targets), "addresses": self.addresses}


def _split(network: IPNetwork, max_addresses: int) -> list[IPNetwork]:
    if network.num_addresses <= max_addresses:
        return [network]
    # Largest power of two not above the chunk size keeps subnets aligned.
    bits = max_addresses.bit_length() - 1
    new_prefix = network.max_prefixlen - bits
    return list(network.subnets(new_prefix=new_prefix))


def plan_executions(parsed: ParsedTargets, max_addresses: int) -> list[PlannedExecution]:
    executions: list[PlannedExecution] = []
    pieces: list[IPNetwork] = []
    # Overlapping or adjacent targets collapse first, so no address is scanned twice.
    for version in (4, 6):
        same_family = [n for n in parsed.networks if n.version == version]
        for network in ipaddress.collapse_addresses(same_family):
            pieces.extend(_split(network, max_addresses))
    batch: list[IPNetwork] = []
    batch_size = 0
    for piece in pieces:
        if batch and batch_size + piece.num_addresses > max_addresses:
            executions.append(
                PlannedExecution("ports", tuple(target_text(n) for n in batch), batch_size)
            )
            batch, batch_size = [], 0
        batch.append(piece)
        batch_size += piece.num_addresses
    if batch:
        executions.append(
            PlannedExecution("ports", tuple(target_text(n) for n in batch), batch_size)
        )
    for start in range(0, len(parsed.domains), DNS_DOMAINS_PER_EXECUTION):
        chunk = tuple(parsed.domains[start : start + DNS_DOMAINS_PER_EXECUTION])
        executions.append(PlannedExecution("dns", chunk, 0))
    return executions


def scan_plan_document(executions: list[PlannedExecution], max_addresses: int) -> dict[str, Any]:
    return {
        "version": PLAN_VERSION,
        "strategy": "address_chunks+dns_first",
        "execution_max_addresses": max_addresses,
        "executions": len(executions),
        "dns_executions": sum(1 for e in executions if e.kind == "dns"),
        "addresses": sum(e.addresses for e in executions),
    }
