"""Log files on disk: which files belong to a domain, what is in them, reading new lines.

A domain's files are the regular files in ``log_dir`` matching one of the
``[traffic] file_patterns`` globs with ``{domain}`` filled in (default
``{domain}.access.log*``: ``access.log``, ``access.log.1``, ``access.log.2.gz``,
``access.log-20260801.gz``). Plain files and gzip files are read; other
compressed formats are skipped (and reported), never misread as text.

``probe`` reads the first bytes of a file's *content* (decompressed for .gz, so
``access.log.1`` and the ``access.log.2.gz`` made from it look the same) and,
for gzip, the ISIZE trailer (uncompressed size mod 2**32) so a compressed copy
of a file that was already read to the end can be recognised without
decompressing it. ``read_lines`` reads from a byte offset (of the content) to
the size seen when the file was opened and hands complete lines, in batches,
to a callback; it reports the offset just after the last complete line. A
trailing line without ``\\n`` in a plain file is not complete (nginx may be in
the middle of writing it); in a gzip file it is (the file is final). A line
longer than ``max_line_bytes`` is never held in memory: the reader drops its
bytes until the next newline and counts it.
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import os
import stat
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FINGERPRINT_BYTES = 1024
CHUNK_BYTES = 4 << 20
UNSUPPORTED_SUFFIXES = (".bz2", ".xz", ".zst", ".lz4", ".zip", ".Z", ".lzma", ".br")


class FileChanged(Exception):
    """The file on disk is not the one the plan was made for (rotated, truncated, replaced)."""


@dataclass(frozen=True)
class LogCandidate:
    path: Path
    device: int
    inode: int
    size: int  # bytes on disk (compressed size for .gz)
    compressed: bool
    mtime: float = 0.0  # last modification, epoch seconds (empty: created or truncated then)

    @property
    def name(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class Probe:
    prefix: bytes  # first FINGERPRINT_BYTES bytes of the content
    gzip_size_mod32: int | None  # ISIZE trailer for .gz


@dataclass
class ReadResult:
    start: int
    end: int  # content offset just after the last complete line consumed
    bytes_read: int
    reached_content_end: bool  # False when a gzip copy holds less than ``start`` bytes


def fingerprint(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def list_domain_files(
    log_dir: Path, domain: str, patterns: tuple[str, ...]
) -> tuple[list[LogCandidate], list[str]]:
    """The domain's readable-format files, and names skipped for an unsupported format."""
    found: dict[str, LogCandidate] = {}
    skipped: list[str] = []
    escaped = glob.escape(domain)
    for pattern in patterns:
        for name in glob.glob(pattern.replace("{domain}", escaped), root_dir=log_dir):
            if name in found or name in skipped:
                continue
            path = log_dir / name
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue  # removed between listing and stat: not part of this snapshot
            if not stat.S_ISREG(st.st_mode):
                continue
            if name.endswith(UNSUPPORTED_SUFFIXES):
                skipped.append(name)
                continue
            found[name] = LogCandidate(
                path=path,
                device=st.st_dev,
                inode=st.st_ino,
                size=st.st_size,
                compressed=name.endswith(".gz"),
                mtime=st.st_mtime,
            )
    return [found[name] for name in sorted(found)], sorted(skipped)


def snapshot(candidates: list[LogCandidate]) -> dict[str, tuple[int, int, int]]:
    return {c.name: (c.device, c.inode, c.size) for c in candidates}


def _open_checked(candidate: LogCandidate):
    handle = open(candidate.path, "rb")  # closed by the caller
    st = os.fstat(handle.fileno())
    if (st.st_dev, st.st_ino) != (candidate.device, candidate.inode):
        handle.close()
        raise FileChanged(f"{candidate.name} was replaced")
    return handle, st


def probe(candidate: LogCandidate) -> Probe:
    handle, st = _open_checked(candidate)
    with handle:
        if not candidate.compressed:
            return Probe(prefix=handle.read(FINGERPRINT_BYTES), gzip_size_mod32=None)
        isize = None
        if st.st_size >= 18:  # smallest gzip member: 10-byte header + 8-byte trailer
            handle.seek(st.st_size - 4)
            isize = int.from_bytes(handle.read(4), "little")
            handle.seek(0)
        with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
            try:
                prefix = stream.read(FINGERPRINT_BYTES)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise OSError(f"{candidate.name}: unreadable gzip ({exc})") from None
        return Probe(prefix=prefix, gzip_size_mod32=isize)


def read_lines(
    candidate: LogCandidate,
    start: int,
    *,
    end: int | None = None,
    max_line_bytes: int,
    on_lines: Callable[[list[bytes]], None],
    on_oversized: Callable[[int], None],
    on_chunk: Callable[[int], None] | None = None,
) -> ReadResult:
    """Feed complete lines from content offset ``start`` to ``end`` (a line end in a plain
    file) or, without ``end``, to the end seen at open time."""
    handle, st = _open_checked(candidate)
    with handle:
        if candidate.compressed:
            try:
                with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
                    return _read_stream(
                        stream, start, None, True, max_line_bytes, on_lines, on_oversized, on_chunk
                    )
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise OSError(f"{candidate.name}: unreadable gzip ({exc})") from None
        if st.st_size < start:
            raise FileChanged(f"{candidate.name} shrank below the checkpoint offset")
        if end is not None and st.st_size < end:
            raise FileChanged(f"{candidate.name} shrank while it was read")
        handle.seek(start)
        limit = st.st_size if end is None else end
        return _read_stream(
            handle, start, limit, False, max_line_bytes, on_lines, on_oversized, on_chunk
        )


def _skip(stream, count: int) -> int:
    """Decompress and drop ``count`` bytes of a gzip stream; returns how many were there."""
    skipped = 0
    while skipped < count:
        chunk = stream.read(min(CHUNK_BYTES, count - skipped))
        if not chunk:
            break
        skipped += len(chunk)
    return skipped


def _read_stream(
    stream,
    start: int,
    limit: int | None,
    final: bool,
    max_line_bytes: int,
    on_lines: Callable[[list[bytes]], None],
    on_oversized: Callable[[int], None],
    on_chunk: Callable[[int], None] | None,
) -> ReadResult:
    if final and start:
        if _skip(stream, start) < start:
            # A compressed copy of a prefix of what was read already: nothing new in it.
            return ReadResult(start=start, end=start, bytes_read=0, reached_content_end=False)
    position = start  # content offset of the next byte to read
    consumed = start  # content offset just after the last complete line
    remaining = None if limit is None else limit - start
    pending = b""  # start of the current, not yet complete, line
    discarding = False  # the current line already exceeded max_line_bytes
    bytes_read = 0
    while remaining is None or remaining > 0:
        size = CHUNK_BYTES if remaining is None else min(CHUNK_BYTES, remaining)
        chunk = stream.read(size)
        if not chunk:
            break
        position += len(chunk)
        bytes_read += len(chunk)
        if remaining is not None:
            remaining -= len(chunk)
        parts = chunk.split(b"\n")
        if len(parts) == 1:
            if not discarding:
                pending += chunk
                if len(pending) > max_line_bytes:
                    discarding, pending = True, b""
        else:
            first = parts[0]
            if discarding:
                on_oversized(1)
                discarding = False
                lines = parts[1:-1]
            else:
                parts[0] = pending + first
                lines = parts[:-1]
            pending = parts[-1]
            consumed = position - len(pending)
            if len(pending) > max_line_bytes:
                discarding, pending = True, b""
            if lines:
                on_lines(lines)
        if on_chunk is not None:
            on_chunk(len(chunk))
    if final:
        # A closed (compressed) file: its last line is complete even without "\n".
        if discarding:
            on_oversized(1)
        elif pending:
            on_lines([pending])
        consumed = position
    return ReadResult(start=start, end=consumed, bytes_read=bytes_read, reached_content_end=True)
