"""Keyset cursor of a task's results pages (ING-10), shared by both adapters.

Results are ordered by address (IPv4 as IPv4-mapped IPv6, like Elasticsearch's
``ip`` type), port, transport and execution; that tuple names one row, so "after
this position" neither loses nor repeats an endpoint, and a page may end between
two ports of one address (``limit`` counts endpoints, so one address with
thousands of ports cannot make a page unbounded). The cursor carries that
position plus the exact IP total the first page computed.

The kind (and so the signing salt) is ``results.endpoints``: a cursor of the
earlier format, which named the last address of a page of whole addresses, fails
the signature check and is a 400 ``invalid_cursor`` instead of a position read
with the wrong meaning.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.cursors import bad_cursor, cursor_int, cursor_str, decode_cursor, encode_cursor
from app.search.ids import normalise_ip

RESULTS_CURSOR_KIND = "results.endpoints"
_MAX_TRANSPORT = 16


@dataclass(frozen=True)
class ResultsPosition:
    """The position after one result row, and the task's IP total (first page)."""

    ip: str  # canonical address text; PostgreSQL compares its ip_order form
    port: int
    transport: str
    execution_id: int
    total_ips: int


def encode_results_cursor(position: ResultsPosition) -> str:
    return encode_cursor(
        RESULTS_CURSOR_KIND,
        {
            "ip": position.ip,
            "port": position.port,
            "transport": position.transport,
            "execution_id": position.execution_id,
            "ips": position.total_ips,
        },
    )


def decode_results_cursor(cursor: str | None) -> ResultsPosition | None:
    """The position in ``cursor`` (``None`` for the first page); a cursor this server
    did not sign, or one holding values no row can have, is ``invalid_cursor``."""
    values = decode_cursor(RESULTS_CURSOR_KIND, cursor)
    if values is None:
        return None
    ip = cursor_str(values, "ip")
    if "%" in ip:
        raise bad_cursor()
    try:
        ip = normalise_ip(ip)
    except ValueError:
        raise bad_cursor() from None
    port = cursor_int(values, "port")
    transport = cursor_str(values, "transport")
    execution_id = cursor_int(values, "execution_id")
    total_ips = cursor_int(values, "ips")
    if not 0 <= port <= 65535 or not 0 < len(transport) <= _MAX_TRANSPORT:
        raise bad_cursor()
    if execution_id < 0 or total_ips < 0:
        raise bad_cursor()
    return ResultsPosition(ip, port, transport, execution_id, total_ips)
