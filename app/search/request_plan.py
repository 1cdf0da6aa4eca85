"""Request-line planning for a final's refresh and count requests (ING-9).

Elasticsearch rejects HTTP request lines longer than ``http.max_initial_line_length``
(4 KiB by default), and a final may name many monthly fact indices. This pure
function splits the sorted, de-duplicated index list into chunks so that every
request line — method, URL-encoded path and query, and ``HTTP/1.1`` — stays
within the budget (3072 bytes by default, ``[elasticsearch]
request_line_max_bytes``). Refresh chunks and count chunks are planned
separately (their paths differ). The shared execution-endpoint index is
refreshed exactly once, folded into the first refresh chunk when it fits; a
handful of months therefore still make a single refresh. An index name that
cannot fit a request line on its own raises ``RequestLineTooLong``: the budget
is never raised to make it fit, and callers plan before writing any fact.

Index names are encoded exactly as elasticsearch-py encodes path parts
(``urllib.parse.quote(value, safe=",*")``), and the URL's base path (a cluster
behind a reverse proxy under ``https://host/es/``) prefixes every line as the
transport sends it (``path_prefix``), so the planned line is the line sent: a
proxy forwards the whole line, prefix included, and a cluster whose limit is
counted without the prefix would refuse a final at the boundary.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.search.port import FinalRequestPlan, RequestLineTooLong

DEFAULT_REQUEST_LINE_MAX_BYTES = 3072
HTTP_VERSION = "HTTP/1.1"


def encode_path_part(value: str) -> str:
    """The path encoding elasticsearch-py applies to index names (commas and * stay)."""
    return urllib.parse.quote(value, safe=",*")


def url_path_prefix(url: str) -> str:
    """The base path the client puts before every request path (``""`` or ``/es``).

    Taken from the transport's own URL parsing, so it is the prefix it sends
    (percent-encoded, without a trailing slash).
    """
    if not url:
        return ""
    # Imported here: the Elasticsearch client is only needed where a cluster is used.
    from elastic_transport.client_utils import url_to_node_config

    return url_to_node_config(url).path_prefix


def request_line(
    method: str, indices: Sequence[str], endpoint: str, query: str = "", path_prefix: str = ""
) -> str:
    """``POST /es/a,b/_refresh?x=y HTTP/1.1`` for ``indices`` and ``endpoint`` (``_refresh``)
    under the URL's ``path_prefix`` (``/es``)."""
    path = path_prefix + "/" + encode_path_part(",".join(indices)) + "/" + endpoint
    if query:
        path += "?" + query
    return f"{method} {path} {HTTP_VERSION}"


def request_line_bytes(
    method: str, indices: Sequence[str], endpoint: str, query: str = "", path_prefix: str = ""
) -> int:
    return len(request_line(method, indices, endpoint, query, path_prefix).encode("utf-8"))


@dataclass(frozen=True)
class PlannedRequest:
    method: str
    endpoint: str  # "_refresh" | "_count" | "_search"
    indices: tuple[str, ...]
    query: str
    line_bytes: int
    path_prefix: str = ""

    @property
    def line(self) -> str:
        return request_line(self.method, self.indices, self.endpoint, self.query, self.path_prefix)


@dataclass(frozen=True)
class FinalRequests:
    refreshes: tuple[PlannedRequest, ...]
    counts: tuple[PlannedRequest, ...]

    @property
    def plan(self) -> FinalRequestPlan:
        lines = [r.line_bytes for r in (*self.refreshes, *self.counts)]
        return FinalRequestPlan(
            refresh_requests=len(self.refreshes),
            count_requests=len(self.counts),
            max_request_line_bytes=max(lines, default=0),
        )


def _chunk(
    method: str,
    endpoint: str,
    names: Sequence[str],
    limit: int,
    query: str,
    lead: str | None = None,
    path_prefix: str = "",
) -> list[PlannedRequest]:
    """Greedy chunks of ``names`` in order; ``lead`` (if any) opens the first chunk.

    Encoding is per character and keeps commas, so a chunk's line is the empty
    line plus its encoded names plus one comma between each two: sizes add up
    without re-encoding the whole chunk for every candidate.
    """
    empty = request_line_bytes(method, [""], endpoint, query, path_prefix)
    sized: list[tuple[str, int]] = []
    for name in ([lead] if lead else []) + list(names):
        encoded = len(encode_path_part(name).encode("utf-8"))
        if empty + encoded > limit:
            raise RequestLineTooLong(name, empty + encoded, limit)
        sized.append((name, encoded))
    chunks: list[tuple[list[str], int]] = []
    current: list[str] = []
    size = empty
    for name, encoded in sized:
        grown = size + encoded + (1 if current else 0)
        if current and grown > limit:
            chunks.append((current, size))
            current, grown = [], empty + encoded
        current.append(name)
        size = grown
    if current:
        chunks.append((current, size))
    return [
        PlannedRequest(
            method=method,
            endpoint=endpoint,
            indices=tuple(chunk),
            query=query,
            line_bytes=line_bytes,
            path_prefix=path_prefix,
        )
        for chunk, line_bytes in chunks
    ]


def plan_final_requests(
    fact_indices: Iterable[str],
    *,
    endpoint_index: str,
    max_line_bytes: int = DEFAULT_REQUEST_LINE_MAX_BYTES,
    refresh_query: str = "",
    count_query: str = "",
    count_endpoint: str = "_count",
    path_prefix: str = "",
) -> FinalRequests:
    """Refresh and count requests for a final touching ``fact_indices``.

    Refreshes cover the fact indices plus ``endpoint_index`` (once, first);
    counts cover the fact indices only, and there are none for an empty list.
    ``count_endpoint`` is the API counting them (``_count``, or ``_search`` when
    the count needs aggregations). ``path_prefix`` is the URL's base path
    (``url_path_prefix``): it counts against the budget on every line.
    """
    names = sorted(set(fact_indices))
    refreshes = _chunk(
        "POST", "_refresh", names, max_line_bytes, refresh_query, endpoint_index, path_prefix
    )
    counts = (
        _chunk("POST", count_endpoint, names, max_line_bytes, count_query, None, path_prefix)
        if names
        else []
    )
    return FinalRequests(refreshes=tuple(refreshes), counts=tuple(counts))
