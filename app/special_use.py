"""Special-use address classes and their ranges (IANA special-purpose registries).

Shared infrastructure: the settings check ``[scan] special_use_targets`` against the
class names, and ``app.target_rules`` refuses targets in these ranges. Kept
here so the settings never import a domain package (no import loop).
"""

from __future__ import annotations

import ipaddress

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Each class with the ranges that make it up (IANA special-purpose registries).
SPECIAL_USE_RANGES: dict[str, tuple[IPNetwork, ...]] = {
    name: tuple(ipaddress.ip_network(n) for n in networks)
    for name, networks in {
        # AWS/GCP/Azure/OpenStack (169.254.169.254, AWS over IPv6), Alibaba, Azure's wire
        # server: instance credentials live behind these.
        "metadata": (
            "169.254.169.254/32",
            "fd00:ec2::254/128",
            "100.100.100.200/32",
            "168.63.129.16/32",
        ),
        "loopback": ("127.0.0.0/8", "::1/128"),
        "private": ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7"),
        "link_local": ("169.254.0.0/16", "fe80::/10"),
        "multicast": ("224.0.0.0/4", "ff00::/8"),
        "broadcast": ("255.255.255.255/32",),
        "unspecified": ("0.0.0.0/8", "::/128"),
    }.items()
}
SPECIAL_USE_CLASSES = tuple(SPECIAL_USE_RANGES)
