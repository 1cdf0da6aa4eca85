"""DNS executions: A, AAAA and CNAME answers of each domain as ``dns_records`` (AGT-2).

dnspython asks the configured name servers (``[agent] dns_nameservers``, else
the system's resolv.conf) and returns TTLs and CNAME chains; when no resolver
is configured at all, the system resolver (``getaddrinfo``) answers A and
AAAA without TTLs. A name that does not exist simply has no records.
"""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from typing import Any

from app.agent.formats import iso_utc
from app.config import AgentSettings


class DnsResolver:
    def __init__(self, settings: AgentSettings):
        import dns.resolver

        self._dns = dns
        self.timeout = settings.dns_timeout_seconds
        nameservers = list(settings.dns_nameservers)
        try:
            self.resolver: Any = dns.resolver.Resolver(configure=not nameservers)
        except dns.resolver.NoResolverConfiguration:
            self.resolver = None
        if nameservers:
            self.resolver = dns.resolver.Resolver(configure=False)
            self.resolver.nameservers = [n.partition(":")[0] for n in nameservers]
            ports = {n.partition(":")[2] for n in nameservers if ":" in n}
            if len(ports) == 1:
                self.resolver.port = int(ports.pop())
        if self.resolver is not None:
            self.resolver.lifetime = self.timeout

    def records(self, name: str) -> list[dict[str, Any]]:
        observed_at = iso_utc(datetime.now(UTC))
        name = name.rstrip(".").lower()
        if self.resolver is None:
            return self._system(name, observed_at)
        resolver_errors = (
            self._dns.resolver.NXDOMAIN,
            self._dns.resolver.NoAnswer,
            self._dns.resolver.NoNameservers,
            self._dns.resolver.LifetimeTimeout,
        )
        found: list[dict[str, Any]] = []
        seen: set[tuple[str, str, str]] = set()
        for rdtype in ("A", "AAAA", "CNAME"):
            try:
                answer = self.resolver.resolve(name, rdtype, raise_on_no_answer=False)
            except resolver_errors:
                continue
            for rrset in answer.response.answer:
                record_type = self._dns.rdatatype.to_text(rrset.rdtype)
                if record_type not in ("A", "AAAA", "CNAME"):
                    continue
                owner = rrset.name.to_text().rstrip(".").lower()
                for item in rrset:
                    value = item.to_text().rstrip(".").lower()
                    key = (owner, record_type, value)
                    if key in seen:
                        continue
                    seen.add(key)
                    found.append(
                        {
                            "observed_at": observed_at,
                            "name": owner,
                            "type": record_type,
                            "value": value,
                            "ttl": int(rrset.ttl),
                        }
                    )
        return found

    def _system(self, name: str, observed_at: str) -> list[dict[str, Any]]:
        try:
            infos = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)
        except socket.gaierror:
            return []
        values = sorted({(info[0], info[4][0]) for info in infos})
        return [
            {
                "observed_at": observed_at,
                "name": name,
                "type": "AAAA" if family == socket.AF_INET6 else "A",
                "value": value,
            }
            for family, value in values
        ]
