"""A tiny authoritative DNS server on 127.0.0.1 (UDP, free port) for the agent's DNS tests.

Answers A/AAAA/CNAME from a dict, following CNAMEs inside the zone the way a
recursive resolver's answer section would; everything else is NXDOMAIN.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype
import dns.rrset

Zone = dict[tuple[str, str], list[str]]  # (name, type) -> values


def _answer(zone: Zone, query: dns.message.Message) -> dns.message.Message:
    response = dns.message.make_response(query)
    response.flags |= dns.flags.AA
    question = query.question[0]
    name = question.name.to_text().rstrip(".").lower()
    wanted = dns.rdatatype.to_text(question.rdtype)
    known = {n for n, _ in zone}
    if name not in known:
        response.set_rcode(dns.rcode.NXDOMAIN)
        return response
    for _ in range(8):  # follow CNAMEs within the zone
        if wanted != "CNAME" and (name, "CNAME") in zone:
            target = zone[(name, "CNAME")][0]
            response.answer.append(
                dns.rrset.from_text(name + ".", 300, "IN", "CNAME", target + ".")
            )
            name = target
            continue
        values = zone.get((name, wanted), [])
        if values:
            suffix = "." if wanted == "CNAME" else ""
            response.answer.append(
                dns.rrset.from_text(name + ".", 300, "IN", wanted, *[v + suffix for v in values])
            )
        break
    return response


@contextmanager
def dns_server(zone: Zone) -> Iterator[str]:
    """Yields ``127.0.0.1:PORT``."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                data, peer = sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                query = dns.message.from_wire(data)
            except dns.exception.DNSException:
                continue  # a malformed query gets no answer
            sock.sendto(_answer(zone, query).to_wire(), peer)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        sock.close()
