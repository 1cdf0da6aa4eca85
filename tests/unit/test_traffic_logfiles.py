"""Reading log files from an offset: complete lines only, gzip content, bounded long lines."""

from __future__ import annotations

import gzip
import os

import pytest

from app.traffic.logfiles import (
    FileChanged,
    list_domain_files,
    probe,
    read_lines,
)


def _read(candidate, start=0, max_line_bytes=64):
    lines: list[bytes] = []
    oversized = []
    result = read_lines(
        candidate,
        start,
        max_line_bytes=max_line_bytes,
        on_lines=lines.extend,
        on_oversized=oversized.append,
    )
    return lines, sum(oversized), result


def _candidate(directory, name):
    candidates, _ = list_domain_files(directory, "d.example", ("{domain}.access.log*",))
    return next(c for c in candidates if c.name == name)


def test_partial_last_line_is_not_consumed(tmp_path):
    path = tmp_path / "d.example.access.log"
    path.write_bytes(b"one\ntwo\nthr")
    lines, _, result = _read(_candidate(tmp_path, path.name))
    assert lines == [b"one", b"two"]
    assert result.end == len(b"one\ntwo\n")
    with open(path, "ab") as handle:
        handle.write(b"ee\nfour")
    lines, _, result = _read(_candidate(tmp_path, path.name), result.end)
    assert lines == [b"three"]
    assert result.end == len(b"one\ntwo\nthree\n")


def test_gzip_content_offsets_and_final_line(tmp_path):
    path = tmp_path / "d.example.access.log.2.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b"one\ntwo\nlast-without-newline")
    candidate = _candidate(tmp_path, path.name)
    found = probe(candidate)
    assert found.prefix.startswith(b"one\ntwo")
    assert found.gzip_size_mod32 == len(b"one\ntwo\nlast-without-newline")
    lines, _, result = _read(candidate, start=4)
    assert lines == [b"two", b"last-without-newline"]
    assert result.end == len(b"one\ntwo\nlast-without-newline")
    # A compressed copy shorter than the offset: nothing new, offset kept.
    lines, _, result = _read(candidate, start=10_000)
    assert lines == [] and result.end == 10_000 and not result.reached_content_end


def test_long_lines_are_dropped_without_being_held(tmp_path, monkeypatch):
    from app.traffic import logfiles

    monkeypatch.setattr(logfiles, "CHUNK_BYTES", 16)  # force lines across many chunks
    path = tmp_path / "d.example.access.log"
    path.write_bytes(b"short\n" + b"x" * 500 + b"\nafter\n" + b"y" * 300)
    lines, oversized, result = _read(_candidate(tmp_path, path.name), max_line_bytes=64)
    assert lines == [b"short", b"after"]
    assert oversized == 1
    # The unfinished long line at the end is neither counted nor consumed yet.
    assert result.end == len(b"short\n" + b"x" * 500 + b"\nafter\n")


def test_chunk_boundaries_do_not_change_lines(tmp_path, monkeypatch):
    from app.traffic import logfiles

    content = b"".join(b"line-%d-%s\n" % (i, b"z" * (i % 13)) for i in range(200))
    path = tmp_path / "d.example.access.log"
    path.write_bytes(content)
    expected = content.split(b"\n")[:-1]
    for chunk in (1, 7, 64, 4096):
        monkeypatch.setattr(logfiles, "CHUNK_BYTES", chunk)
        lines, _, result = _read(_candidate(tmp_path, path.name), max_line_bytes=1024)
        assert lines == expected
        assert result.end == len(content)


def test_replaced_file_is_detected(tmp_path):
    path = tmp_path / "d.example.access.log"
    path.write_bytes(b"a\n")
    candidate = _candidate(tmp_path, path.name)
    os.rename(path, tmp_path / "d.example.access.log.1")
    path.write_bytes(b"b\n")
    with pytest.raises(FileChanged):
        _read(candidate)


def test_listing_matches_patterns_and_skips_other_formats(tmp_path):
    for name in (
        "d.example.access.log",
        "d.example.access.log.1",
        "d.example.access.log.2.gz",
        "d.example.access.log.3.bz2",
        "d.example.error.log",
        "xd.example.access.log",
    ):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "d.example.access.log.d").mkdir()
    candidates, skipped = list_domain_files(tmp_path, "d.example", ("{domain}.access.log*",))
    assert [c.name for c in candidates] == [
        "d.example.access.log",
        "d.example.access.log.1",
        "d.example.access.log.2.gz",
    ]
    assert [c.compressed for c in candidates] == [False, False, True]
    assert skipped == ["d.example.access.log.3.bz2"]
