"""Export file formats: CSV, JSON lines and a zip of both with a manifest (EXP-7).

Each format is a generator of byte chunks fed by keyset pages of execution
endpoints, one chunk per page, so ``ObjectStore.put`` can stream it: memory
holds one page (and, for S3, one upload part), however large the task.

The zip holds ``endpoints.csv``, ``endpoints.jsonl`` and ``manifest.json``
(the task, its executions, row counts and the SHA-256 of each member). It is
written by ``zipfile`` into a sink that the generator drains after every page,
with data descriptors, so the archive never needs seeking; one pass over the
pages feeds both members, each deflated on its own thread (the JSON lines wait,
compressed, in an unnamed temporary file).

The generators take pages already encoded (``EncodedPage``: the page's CSV rows
and JSON lines as bytes). ``encode_pages`` encodes endpoint documents here, in
Python (any search store); on the PostgreSQL store the database writes the same
bytes itself (``app.search.export_text``, ``app.exports.build``).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import queue
import tempfile
import threading
import time
import zipfile
import zlib
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
# An asset export (a search of current assets) also says whether each asset is open or
# gone, and since when: with ``status`` all it holds both, and they read alike otherwise.
ASSET_CSV_COLUMNS = (*CSV_COLUMNS, "status", "gone_since")


@dataclass(frozen=True)
class EncodedPage:
    """One page of an export: its row count, CSV rows (no header) and JSON lines."""

    rows: int
    csv: bytes = b""
    jsonl: bytes = b""


Pages = Callable[[], Iterable[EncodedPage]]


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
    """A UTC time with its microseconds always written (``isoformat`` leaves them out when
    they are zero, so one column mixed two widths)."""
    if value is None:
        return ""
    return value.isoformat(timespec="microseconds").replace("+00:00", "Z")


def endpoint_record(doc: EndpointDocument, *, asset: bool = False) -> dict[str, Any]:
    record = _endpoint_record(doc)
    if asset:
        record["status"] = doc.status or "open"
        record["gone_since"] = _iso(doc.gone_since) or None
    return record


def _endpoint_record(doc: EndpointDocument) -> dict[str, Any]:
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


# Spreadsheets read a cell starting with one of these as a formula (OWASP "CSV
# injection"): such a text cell gets a leading quote, which spreadsheets show as text
# and hide. Only CSV does this; JSON lines carry every value exactly as stored
# (docs/security.md). app.search.export_text writes the same bytes in SQL.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    """A text cell neutralised against formula injection (empty for ``""``)."""
    return "'" + value if value.startswith(FORMULA_STARTS) else value


class CsvEncoder:
    """CSV text of endpoint pages, header first (one writer reused across pages)."""

    def __init__(self, *, assets: bool = False) -> None:
        self._assets = assets
        self._buffer = io.StringIO()
        self._writer = csv.writer(self._buffer, lineterminator="\n")
        # ``csv.writer`` quotes a cell holding a character of its line terminator, so
        # with "\n" a lone CR went unquoted, and spreadsheets (and Python's reader)
        # break the row there: the text after it became a new row whose first cell
        # escaped the formula guard. A row with a CR is written by a writer whose
        # terminator holds CR, and its "\r\n" end then becomes "\n".
        self._cr_writer = csv.writer(self._buffer, lineterminator="\r\n")

    def _take(self) -> bytes:
        data = self._buffer.getvalue().encode("utf-8")
        self._buffer.seek(0)
        self._buffer.truncate()
        return data

    def header(self) -> bytes:
        self._writer.writerow(ASSET_CSV_COLUMNS if self._assets else CSV_COLUMNS)
        return self._take()

    def page(self, page: list[EndpointDocument]) -> bytes:
        rows = self._rows(page)
        if self._assets:
            rows = (
                (*row, csv_text(d.status or "open"), _iso(d.gone_since))
                for row, d in zip(rows, page, strict=True)
            )
        for row in rows:
            if any(type(cell) is str and "\r" in cell for cell in row):
                self._cr_writer.writerow(row)
                self._buffer.seek(self._buffer.tell() - 2)
                self._buffer.truncate()
                self._buffer.write("\n")
            else:
                self._writer.writerow(row)
        return self._take()

    @staticmethod
    def _rows(page: list[EndpointDocument]) -> Iterator[tuple[Any, ...]]:
        return (
            (
                d.task_id,
                d.execution_id,
                d.ip,
                d.port,
                csv_text(d.transport),
                csv_text(d.state or ""),
                csv_text(d.service or ""),
                csv_text(d.product or ""),
                csv_text(d.version or ""),
                csv_text(d.hostname or ""),
                csv_text(d.banner or ""),
                csv_text(";".join(d.tags)),
                _iso(d.first_seen),
                _iso(d.last_seen),
            )
            for d in page
        )


_json_line = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


def jsonl_page(page: list[EndpointDocument], *, assets: bool = False) -> bytes:
    if not page:
        return b""
    lines = (_json_line(endpoint_record(d, asset=assets)) for d in page)
    return ("\n".join(lines) + "\n").encode("utf-8")


def encode_pages(
    pages: Iterable[list[EndpointDocument]],
    *,
    csv: bool = True,
    jsonl: bool = True,
    assets: bool = False,
) -> Iterator[EncodedPage]:
    """Endpoint documents encoded in Python, page by page (only the formats asked for);
    ``assets``: current assets, with their ``status`` and ``gone_since``."""
    encoder = CsvEncoder(assets=assets)
    for page in pages:
        yield EncodedPage(
            rows=len(page),
            csv=encoder.page(page) if csv else b"",
            jsonl=jsonl_page(page, assets=assets) if jsonl else b"",
        )


def csv_header(*, assets: bool = False) -> bytes:
    return CsvEncoder(assets=assets).header()


def csv_chunks(
    pages: Iterable[EncodedPage], stats: MemberStats, *, assets: bool = False
) -> Iterator[bytes]:
    header = csv_header(assets=assets)
    stats.add(header, 0)
    yield header
    for page in pages:
        stats.add(page.csv, page.rows)
        yield page.csv


def jsonl_chunks(pages: Iterable[EncodedPage], stats: MemberStats) -> Iterator[bytes]:
    for page in pages:
        if page.jsonl:
            stats.add(page.jsonl, page.rows)
            yield page.jsonl


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


# Deflate level of both members: level 1 is several times faster than zlib's default 6 on
# export text and the archive only a little larger (docs/operations.md, "Exports").
ZIP_LEVEL = 1
_SPOOL_QUEUE_CHUNKS = 4


class _DeflatedSpool:
    """A zip member deflated by its own thread into an unnamed temporary file.

    zlib, crc32 and sha256 release the GIL on large buffers, so while the caller
    compresses one member this thread compresses the other on the second core.
    The queue is bounded (a few chunks), so memory stays flat; the compressed
    bytes wait on disk until the member is copied into the archive as is.
    """

    def __init__(self, stats: MemberStats, *, name: str):
        self.stats = stats
        self.file = tempfile.TemporaryFile(prefix="netmap-export-")
        self.size = self.compressed_size = self.crc = 0
        self._queue: queue.Queue[tuple[bytes, int] | None] = queue.Queue(_SPOOL_QUEUE_CHUNKS)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        compressor = zlib.compressobj(ZIP_LEVEL, zlib.DEFLATED, -15)
        try:
            while (item := self._queue.get()) is not None:
                data, rows = item
                self.stats.add(data, rows)
                self.crc = zlib.crc32(data, self.crc)
                self.size += len(data)
                self._write(compressor.compress(data))
            self._write(compressor.flush())
        except BaseException as exc:  # noqa: BLE001 - raised in the caller by finish()
            self._error = exc
            while self._queue.get() is not None:  # let the caller's puts and finish() go on
                pass

    def _write(self, data: bytes) -> None:
        if data:
            self.file.write(data)
            self.compressed_size += len(data)

    def add(self, data: bytes, rows: int) -> None:
        self._queue.put((data, rows))

    def finish(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
        self.file.seek(0)

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.file.close()


def _member_info(name: str) -> zipfile.ZipInfo:
    """A deflated member dated now (zip times are local times, as ``writestr`` dates one);
    a member opened by name is dated 1980."""
    info = zipfile.ZipInfo(name, date_time=time.localtime(time.time())[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o600 << 16
    return info


def _copy_deflated_member(
    archive: zipfile.ZipFile, sink: _DrainSink, name: str, spool: _DeflatedSpool
) -> Iterator[bytes]:
    """Append an already deflated member (sizes and CRC known) to a streamed archive.

    ``zipfile`` has no call for data compressed elsewhere, so this writes what
    ``ZipFile.open(name, "w")`` would: the local header (zip64 sizes), the data,
    and the member's entry for the central directory ``ZipFile.close`` writes.
    """
    info = _member_info(name)
    info.file_size, info.compress_size, info.CRC = spool.size, spool.compressed_size, spool.crc
    info.header_offset = archive.fp.tell()  # type: ignore[union-attr]
    archive.fp.write(info.FileHeader(zip64=True))  # type: ignore[union-attr]
    while chunk := spool.file.read(1024 * 1024):
        archive.fp.write(chunk)  # type: ignore[union-attr]
        yield sink.drain()
    archive.start_dir = archive.fp.tell()  # type: ignore[union-attr]
    archive.filelist.append(info)
    archive.NameToInfo[name] = info


def zip_chunks(
    pages: Pages, manifest: dict[str, Any], members: dict[str, Any], *, assets: bool = False
) -> Iterator[bytes]:
    """The zip archive, from one pass over the pages.

    The CSV member is compressed into the archive as the pages arrive; the JSON
    lines of the same pages are compressed at the same time by a second thread
    into an unnamed temporary file (disk, not memory) and copied in as the
    second member. ``members`` is filled with each member's stats; ``manifest``
    gets them too.
    """
    sink = _DrainSink()
    csv_stats, jsonl_stats = MemberStats(), MemberStats()
    spool = _DeflatedSpool(jsonl_stats, name="export-zip-jsonl")
    try:
        with zipfile.ZipFile(
            sink, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=ZIP_LEVEL
        ) as archive:
            csv_info = _member_info("endpoints.csv")
            # The archive's level (a ZipInfo opened for writing carries its own; the
            # attribute is public from Python 3.13).
            level = "compress_level" if hasattr(csv_info, "compress_level") else "_compresslevel"
            setattr(csv_info, level, ZIP_LEVEL)
            with archive.open(csv_info, "w", force_zip64=True) as member:
                header = csv_header(assets=assets)
                csv_stats.add(header, 0)
                member.write(header)
                for page in pages():
                    if page.jsonl:
                        spool.add(page.jsonl, page.rows)
                    csv_stats.add(page.csv, page.rows)
                    member.write(page.csv)
                    data = sink.drain()
                    if data:
                        yield data
            spool.finish()
            yield from _copy_deflated_member(archive, sink, "endpoints.jsonl", spool)
            members["endpoints.csv"] = csv_stats.as_dict()
            members["endpoints.jsonl"] = jsonl_stats.as_dict()
            manifest["members"] = dict(members)
            body = json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8")
            archive.writestr("manifest.json", body)
        yield sink.drain()
    finally:
        spool.close()
