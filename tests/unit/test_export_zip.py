"""The export zip: both members deflated at once, one of them copied in already compressed.

``zip_chunks`` deflates the CSV member through ``zipfile`` while a second thread
deflates the JSON lines into a temporary file, then appends that member with its
own local header. The archive must stay an ordinary zip: Python's ``zipfile`` and
Info-ZIP's ``unzip -t`` (a real process) read it, and every member is the exact
bytes that went in.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import threading
import zipfile
from collections.abc import Iterator

import pytest

from app.exports.formats import EncodedPage, csv_header, zip_chunks


def _pages(count: int) -> list[EncodedPage]:
    pages = []
    for n in range(count):
        csv = "".join(f"1,2,10.0.{n}.{i},{i},tcp,open,é\n" for i in range(300)).encode()
        jsonl = "".join(f'{{"n":{n},"i":{i},"s":"ü"}}\n' for i in range(300)).encode()
        pages.append(EncodedPage(rows=300, csv=csv, jsonl=jsonl))
    return pages


def _build(pages: list[EncodedPage]) -> tuple[bytes, dict, dict]:
    manifest: dict = {"export_id": 1}
    members: dict = {}
    data = b"".join(zip_chunks(lambda: iter(pages), manifest, members))
    return data, manifest, members


def _export_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "export-zip-jsonl"]


def test_both_members_are_the_bytes_that_went_in_and_the_manifest_names_their_digests():
    pages = _pages(40)
    data, manifest, members = _build(pages)
    expected = {
        "endpoints.csv": csv_header() + b"".join(p.csv for p in pages),
        "endpoints.jsonl": b"".join(p.jsonl for p in pages),
    }
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == ["endpoints.csv", "endpoints.jsonl", "manifest.json"]
        for name, body in expected.items():
            assert archive.read(name) == body
            info = archive.getinfo(name)
            assert info.compress_type == zipfile.ZIP_DEFLATED
            assert info.compress_size < info.file_size
        written = json.loads(archive.read("manifest.json"))
    assert written == manifest
    for name, body in expected.items():
        assert members[name]["sha256"] == hashlib.sha256(body).hexdigest()
        assert members[name]["bytes"] == len(body)
        assert members[name]["rows"] == 40 * 300
    assert not _export_threads()


@pytest.mark.skipif(shutil.which("unzip") is None, reason="Info-ZIP unzip is not installed")
def test_info_zip_unzip_tests_the_archive_clean(tmp_path):
    data, _, _ = _build(_pages(5))
    path = tmp_path / "export.zip"
    path.write_bytes(data)
    process = subprocess.run(["unzip", "-t", str(path)], capture_output=True, text=True)
    assert process.returncode == 0, process.stdout + process.stderr
    assert "No errors detected" in process.stdout
    for name in ("endpoints.csv", "endpoints.jsonl", "manifest.json"):
        assert f"testing: {name}" in process.stdout


def test_an_empty_export_is_a_valid_zip_with_empty_json_lines():
    data, _, members = _build([])
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.testzip() is None
        assert archive.read("endpoints.csv") == csv_header()
        assert archive.read("endpoints.jsonl") == b""
    assert members["endpoints.jsonl"]["rows"] == 0


def test_a_failing_page_source_stops_the_compressing_thread():
    def pages() -> Iterator[EncodedPage]:
        yield from _pages(3)
        raise RuntimeError("the database went away")

    with pytest.raises(RuntimeError, match="went away"):
        b"".join(zip_chunks(pages, {}, {}))
    assert not _export_threads()


def test_a_consumer_that_stops_early_stops_the_compressing_thread():
    chunks = zip_chunks(lambda: iter(_pages(20)), {}, {})
    next(chunks)
    chunks.close()
    assert not _export_threads()
