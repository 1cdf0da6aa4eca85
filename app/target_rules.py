"""Parsing scan targets, ports and transports (SCN-1).

Targets are IPv4/IPv6 addresses, CIDR networks and domain names (IDNA 2008
with UTS #46 mapping, RFC 1123 labels). Everything is normalised (compressed
IPv6, lower-case A-labels, no trailing dot) so equal targets compare equal, and
every bad entry is reported at once with its index and the reason, rather than
stopping at the first.

Special-use addresses (SCN-7) follow ``[scan] special_use_targets``: the
classes listed there may be targeted, the others are refused — for task
targets, for the addresses a DNS task turns into its follow-up task and, on
the scan host, for what the agent is asked to scan, alike. By default only
private ranges (labs, internal networks) are allowed; loopback (the netmap
host itself), cloud metadata endpoints, link-local (169.254.0.0/16, fe80::/10),
multicast, broadcast and unspecified addresses are refused. The metadata class
is checked first, so a metadata address is refused by that name even where
link-local or private ranges are allowed. A network is refused when it
overlaps a refused range; an IPv4-mapped IPv6 address is judged by its IPv4
address. The test configuration allows loopback (the suite scans 127.0.0.0/8
with real nmap), as does ``make up`` for local trials (docs/security.md).

This module is shared with the scanner agent (``app.agent.targets``), which
applies the same rules to what a server hands it; it must stay importable
without the server stack (no Flask, SQLAlchemy, psycopg2, Elasticsearch).
Control characters and whitespace inside a target are refused (a newline in a
target file is one more target for nmap).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import idna

from app.config import ScanSettings
from app.errors import ValidationError
from app.special_use import SPECIAL_USE_CLASSES, SPECIAL_USE_RANGES  # noqa: F401 - re-exported

TRANSPORTS = ("tcp", "udp")
_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
_PORT_ITEM = re.compile(r"^\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?$")
_CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f-\x9f\s]")

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# The special-use classes and their ranges live in app/special_use.py (settings check them).


def _mapped_v4(network: IPNetwork) -> IPNetwork:
    """``::ffff:a.b.c.d/n`` judged as the IPv4 network it maps."""
    if network.version == 6 and network.prefixlen >= 96:
        mapped = network.network_address.ipv4_mapped
        if mapped is not None:
            return ipaddress.ip_network(f"{mapped}/{network.prefixlen - 96}", strict=False)
    return network


def refused_special_use(network: IPNetwork, allowed: Iterable[str]) -> str | None:
    """The special-use class ``network`` touches that ``allowed`` does not list, or None."""
    allowed = set(allowed)
    candidate = _mapped_v4(network)
    for name, ranges in SPECIAL_USE_RANGES.items():
        if name in allowed:
            continue
        for special in ranges:
            if special.version == candidate.version and candidate.overlaps(special):
                return name
    return None


def _inside_special_use(network: IPNetwork) -> bool:
    candidate = _mapped_v4(network)
    return any(
        special.version == candidate.version and candidate.subnet_of(special)  # type: ignore[arg-type]
        for ranges in SPECIAL_USE_RANGES.values()
        for special in ranges
    )


def special_use_reason(name: str) -> str:
    return (
        f"{name.replace('_', '-')} addresses are not scannable targets here "
        "([scan] special_use_targets)"
    )


@dataclass(frozen=True)
class Problem:
    field: str
    index: int | None
    value: Any
    reason: str

    def as_dict(self) -> dict[str, Any]:
        item: dict[str, Any] = {"field": self.field, "value": self.value, "reason": self.reason}
        if self.index is not None:
            item["index"] = self.index
        return item


@dataclass
class ParsedTargets:
    """Normalised targets; ``networks`` holds single addresses as /32 or /128."""

    networks: list[IPNetwork] = field(default_factory=list)
    domains: list[str] = field(default_factory=list)

    @property
    def normalised(self) -> list[str]:
        out = [target_text(n) for n in self.networks]
        out.extend(self.domains)
        return out

    @property
    def address_count(self) -> int:
        return count_addresses(self.networks)


def target_text(network: IPNetwork) -> str:
    """A single address prints without its prefix length."""
    if network.prefixlen == network.max_prefixlen:
        return str(network.network_address)
    return str(network)


def target_kind(network: IPNetwork) -> str:
    return "ip" if network.prefixlen == network.max_prefixlen else "cidr"


def count_addresses(networks: Iterable[IPNetwork]) -> int:
    """Distinct addresses covered, so overlapping entries are not counted twice."""
    v4 = [n for n in networks if n.version == 4]
    v6 = [n for n in networks if n.version == 6]
    total = 0
    for group in (v4, v6):
        for collapsed in ipaddress.collapse_addresses(group):
            total += collapsed.num_addresses
    return total


def normalise_domain(raw: str) -> str:
    """IDNA A-label form of a host name; raises ValueError naming what is wrong."""
    name = raw.strip()
    if name.endswith("."):
        name = name[:-1]
    if not name:
        raise ValueError("empty domain name")
    if "*" in name:
        raise ValueError("wildcards are not scannable targets")
    try:
        ascii_name = idna.encode(name, uts46=True).decode("ascii")
    except idna.IDNAError as exc:
        raise ValueError(f"not a valid internationalised domain name: {exc}") from None
    ascii_name = ascii_name.lower()
    if len(ascii_name) > 253:
        raise ValueError("domain name longer than 253 characters")
    labels = ascii_name.split(".")
    if len(labels) < 2:
        raise ValueError("domain name needs at least two labels (e.g. example.com)")
    for label in labels:
        if not _LABEL.match(label):
            raise ValueError(
                f"label {label!r} must be 1-63 letters, digits or hyphens, "
                "not starting or ending with a hyphen"
            )
    if labels[-1].isdigit():
        raise ValueError("top-level label cannot be all digits (looks like a malformed address)")
    return ascii_name


def _parse_address_or_network(text: str) -> IPNetwork:
    if "%" in text:
        raise ValueError("IPv6 zone identifiers are not supported")
    if "/" in text:
        try:
            return ipaddress.ip_network(text, strict=True)
        except ValueError as exc:
            if "host bits set" in str(exc):
                loose = ipaddress.ip_network(text, strict=False)
                raise ValueError(f"host bits set; did you mean {loose}?") from None
            raise ValueError(f"not a valid CIDR network: {exc}") from None
    address = ipaddress.ip_address(text)
    return ipaddress.ip_network(address)


# "10.0.0.1-5", "10.0.0.1-10.0.0.9", "fe80::1-fe80::9": a range, as nmap writes it.
_ADDRESS_RANGE = re.compile(r"[\d.]+-[\d.]+|[0-9a-fA-F:.]*:[0-9a-fA-F:.]*-[0-9a-fA-F:.]+")


def _looks_like_ip(text: str) -> bool:
    return ":" in text or "/" in text or bool(re.fullmatch(r"[\d.]+", text))


def parse_targets(raw: Any, limits: ScanSettings) -> tuple[ParsedTargets, list[Problem]]:
    problems: list[Problem] = []
    parsed = ParsedTargets()
    if not isinstance(raw, list) or not raw:
        return parsed, [Problem("targets", None, raw, "must be a non-empty list of strings")]
    if len(raw) > limits.max_targets_per_task:
        return parsed, [
            Problem(
                "targets",
                None,
                len(raw),
                f"at most {limits.max_targets_per_task} targets per task",
            )
        ]
    seen: set[str] = set()
    for index, item in enumerate(raw):
        if not isinstance(item, str) or not item.strip():
            problems.append(Problem("targets", index, item, "must be a non-empty string"))
            continue
        text = item.strip()
        if _CONTROL_OR_SPACE.search(text):
            problems.append(
                Problem(
                    "targets",
                    index,
                    text[:64],
                    "control characters or whitespace inside a target",
                )
            )
            continue
        if len(text) > 300:
            problems.append(
                Problem("targets", index, text[:64] + "…", "longer than 300 characters")
            )
            continue
        try:
            if _ADDRESS_RANGE.fullmatch(text):
                # Would otherwise read as a host name ("10.0.0.1-5") and be resolved.
                raise ValueError(
                    "address ranges are not targets; give a CIDR block (10.0.0.0/29) "
                    "or the addresses one by one"
                )
            if _looks_like_ip(text):
                network = _parse_address_or_network(text)
                if network.num_addresses > limits.max_addresses_per_task and not (
                    _inside_special_use(network)
                ):
                    # Said before the special-use check: a whole internet (0.0.0.0/0)
                    # touches special ranges, but its size is what is wrong (127.0.0.0/8
                    # lies inside one, and that is what is said).
                    raise ValueError(
                        f"covers {network.num_addresses} addresses; the limit per task is "
                        f"{limits.max_addresses_per_task}"
                    )
                refused = refused_special_use(network, limits.special_use_targets)
                if refused is not None:
                    raise ValueError(special_use_reason(refused))
                key = target_text(network)
                if key not in seen:
                    seen.add(key)
                    parsed.networks.append(network)
            else:
                domain = normalise_domain(text)
                if len(domain) > limits.max_domain_length:
                    raise ValueError(f"longer than {limits.max_domain_length} characters")
                if domain not in seen:
                    seen.add(domain)
                    parsed.domains.append(domain)
        except ValueError as exc:
            problems.append(Problem("targets", index, text, str(exc)))
    if not problems:
        total = parsed.address_count
        if total > limits.max_addresses_per_task:
            problems.append(
                Problem(
                    "targets",
                    None,
                    total,
                    f"targets cover {total} addresses; the limit per task is "
                    f"{limits.max_addresses_per_task}",
                )
            )
    return parsed, problems


def parse_ports(raw: Any, limits: ScanSettings) -> tuple[list[tuple[int, int]], list[Problem]]:
    """``"22,80,8000-8100"`` → merged, sorted ranges ``[(22, 22), (80, 80), (8000, 8100)]``."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = str(raw)
    if not isinstance(raw, str) or not raw.strip():
        return [], [Problem("ports", None, raw, "must be a string such as '22,80,8000-8100'")]
    problems: list[Problem] = []
    ranges: list[tuple[int, int]] = []
    for index, part in enumerate(raw.split(",")):
        match = _PORT_ITEM.match(part)
        if not match:
            problems.append(
                Problem("ports", index, part, "must be a port or a range like 8000-8100")
            )
            continue
        low = int(match.group(1))
        high = int(match.group(2)) if match.group(2) is not None else low
        if not (1 <= low <= 65535 and 1 <= high <= 65535):
            problems.append(Problem("ports", index, part.strip(), "ports must be 1-65535"))
            continue
        if high < low:
            problems.append(Problem("ports", index, part.strip(), "range end is below its start"))
            continue
        ranges.append((low, high))
    merged = merge_ranges(ranges)
    count = sum(high - low + 1 for low, high in merged)
    if not problems and count > limits.max_ports_per_task:
        problems.append(
            Problem("ports", None, count, f"at most {limits.max_ports_per_task} ports per task")
        )
    return merged, problems


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(ranges):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def format_ports(ranges: Iterable[tuple[int, int]]) -> str:
    return ",".join(str(lo) if lo == hi else f"{lo}-{hi}" for lo, hi in ranges)


def parse_transports(raw: Any) -> tuple[list[str], list[Problem]]:
    if raw is None:
        return ["tcp"], []
    if not isinstance(raw, list) or not raw:
        return [], [Problem("transports", None, raw, "must be a non-empty list of 'tcp'/'udp'")]
    problems = [
        Problem("transports", i, t, "must be 'tcp' or 'udp'")
        for i, t in enumerate(raw)
        if t not in TRANSPORTS
    ]
    return sorted(set(t for t in raw if t in TRANSPORTS)), problems


def raise_if_problems(problems: list[Problem]) -> None:
    if not problems:
        return
    fields = {p.field for p in problems}
    code = "invalid_targets" if "targets" in fields else f"invalid_{sorted(fields)[0]}"
    raise ValidationError(
        f"{len(problems)} invalid item(s) in the task",
        code=code,
        details={"items": [p.as_dict() for p in problems]},
    )
