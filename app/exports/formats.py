"""Export file formats: CSV, JSON lines and a zip of both with a manifest (EXP-7).

Each format is a generator of byte chunks fed by keyset pages of execution
endpoints, one chunk per page, so ``ObjectStore.put`` can stream it: memory
holds one page (and, for S3, one upload part), however large the task.

The zip holds ``endpoints.csv``, ``endpoints.jsonl`` and ``manifest.json``
(the task, its executions, row counts and the SHA-256 of each member). It is
written by ``zipfile`` into a sink that the generator drains after every page;
members are written one after the other (one pass over the pages each), with
data descriptors, so the archive never needs seeking.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from app.search.documents import EndpointDocument

CSV_COLUMNS = (
    "task_id",
    "execution_id",
    "ip",
    "port",
    "transport",
    "state",
    "service",
    "product",
    "version",
    "hostname",
    "banner",
    "tags",
    "first_seen",
    "last_seen",
)

Pages = Callable[[], Iterable[list[EndpointDocument]]]


@dataclass
class MemberStats:
    rows: int = 0
    bytes: int = 0
    digest: Any = field(default_factory=hashlib.sha256)

    def add(self, chunk: bytes, rows: int) -> None:
        self.rows += rows
        self.bytes += len(chunk)
        self.digest.update(chunk)

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "bytes": self.bytes, "sha256": self.digest.hexdigest()}


def _iso(value: Any) -> str:
    return value.isoformat().replace("+00:00", "Z") if value is not None else ""


def endpoint_record(doc: EndpointDocument) -> dict[str, Any]:
    return {
        "task_id": doc.task_id,
        "execution_id": doc.execution_id,
        "ip": doc.ip,
        "port": doc.port,
        "transport": doc.transport,
        "state": doc.state,
        "service": doc.service,
        "product": doc.product,
        "version": doc.version,
        "hostname": doc.hostname,
        "banner": doc.banner,
        "tags": list(doc.tags),
        "first_seen": _iso(doc.first_seen),
        "last_seen": _iso(doc.last_seen),
        "details": dict(doc.details),
    }


def csv_chunks(pages: Iterable[list[EndpointDocument]], stats: MemberStats) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    header = buffer.getvalue().encode("utf-8")
    stats.add(header, 0)
    yield header
    for page in pages:
        buffer.seek(0)
        buffer.truncate()
        writer.writerows(
            (
                d.task_id,
                d.execution_id,
                d.ip,
                d.port,
                d.transport,
                d.state or "",
                d.service or "",
                d.product or "",
                d.version or "",
                d.hostname or "",
                d.banner or "",
                ";".join(d.tags),
                _iso(d.first_seen),
                _iso(d.last_seen),
            )
            for d in page
        )
        chunk = buffer.getvalue().encode("utf-8")
        stats.add(chunk, len(page))
        yield chunk


def jsonl_chunks(pages: Iterable[list[EndpointDocument]], stats: MemberStats) -> Iterator[bytes]:
    dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode
    for page in pages:
        if not page:
            continue
        chunk = ("\n".join(dumps(endpoint_record(d)) for d in page) + "\n").encode("utf-8")
        stats.add(chunk, len(page))
        yield chunk


class _DrainSink:
    """A write-only, unseekable file for ``zipfile`` whose contents are taken as they come."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def flush(self) -> None:
        pass

    def drain(self) -> bytes:
        data = b"".join(self._parts)
        self._parts.clear()
        return data


def zip_chunks(pages: Pages, manifest: dict[str, Any], members: dict[str, Any]) -> Iterator[bytes]:
    """The zip archive; ``pages`` is called once per data member (a fresh pass each).

    ``members`` is filled with each member's stats; ``manifest`` gets them too.
    """
    sink = _DrainSink()
    with zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, render in (("endpoints.csv", csv_chunks), ("endpoints.jsonl", jsonl_chunks)):
            stats = MemberStats()
            with archive.open(name, "w", force_zip64=True) as member:
                for chunk in render(pages(), stats):
                    member.write(chunk)
                    data = sink.drain()
                    if data:
                        yield data
            members[name] = stats.as_dict()
        manifest["members"] = dict(members)
        body = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
        archive.writestr("manifest.json", body)
    yield sink.drain()
