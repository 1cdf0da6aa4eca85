"""One contract for every object-store adapter: filesystem and S3 (moto's server) (EXP-1..4)."""

from __future__ import annotations

import hashlib
import io
import os
import time
import urllib.request

import pytest

from app.object_store.deleter import delete_objects
from app.object_store.port import InvalidObjectKey, ObjectNotFound

pytestmark = pytest.mark.contract

BAD_KEYS = [
    "",
    "/etc/passwd",
    "../outside",
    "a/../../outside",
    "a/./b",
    "a//b",
    "a/b/",
    "nul\x00byte",
    "space in key",
    "back\\slash",
    "unicodé",
    "x" * 600,
    "/".join(["s"] * 9),
]


def _read(store, key: str) -> bytes:
    with store.open(key) as handle:
        return handle.read()


def test_put_open_exists_size_round_trip(object_store):
    data = b"hello, object store\n"
    ref = object_store.put("reports/1/a.txt", data, "text/plain")
    assert (ref.key, ref.size, ref.content_type) == ("reports/1/a.txt", len(data), "text/plain")
    assert ref.sha256 == hashlib.sha256(data).hexdigest()
    assert _read(object_store, "reports/1/a.txt") == data
    assert object_store.exists("reports/1/a.txt")
    assert object_store.size("reports/1/a.txt") == len(data)
    assert not object_store.exists("reports/1/b.txt")


def test_put_accepts_file_objects_iterables_and_empty_payloads(object_store):
    object_store.put("t/file", io.BytesIO(b"from a file"), "application/octet-stream")
    object_store.put("t/chunks", iter([b"one ", b"", b"two ", b"three"]), "text/plain")
    empty = object_store.put("t/empty", b"", "text/plain")
    assert _read(object_store, "t/file") == b"from a file"
    assert _read(object_store, "t/chunks") == b"one two three"
    assert empty.size == 0 and _read(object_store, "t/empty") == b""


def test_put_replaces_the_previous_object(object_store):
    object_store.put("t/k", b"first version, longer", "text/plain")
    object_store.put("t/k", b"second", "text/plain")
    assert _read(object_store, "t/k") == b"second"
    assert object_store.size("t/k") == 6


def test_delete_says_whether_the_object_was_there(object_store):
    object_store.put("t/gone", b"x", "text/plain")
    assert object_store.delete("t/gone") is True
    assert object_store.delete("t/gone") is False
    assert not object_store.exists("t/gone")
    with pytest.raises(ObjectNotFound):
        object_store.open("t/gone")
    with pytest.raises(ObjectNotFound):
        object_store.size("t/gone")


@pytest.mark.parametrize("key", BAD_KEYS, ids=repr)
def test_bad_keys_are_refused_before_any_io(object_store, key, tmp_path):
    before = sorted(p for p in tmp_path.rglob("*"))
    for call in (
        lambda: object_store.put(key, b"x", "text/plain"),
        lambda: object_store.open(key),
        lambda: object_store.delete(key),
        lambda: object_store.exists(key),
        lambda: object_store.url_for(key, 60),
    ):
        with pytest.raises(InvalidObjectKey):
            call()
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert not (tmp_path / "outside").exists()


def test_large_objects_stream_through_in_parts(object_store):
    # 12 MiB in 64 KiB chunks: three 5 MiB parts on S3, one streamed file on disk.
    block = os.urandom(64 * 1024)
    count = 12 * 16
    digest = hashlib.sha256(block * count).hexdigest()
    ref = object_store.put("big/object.bin", (block for _ in range(count)), "application/zip")
    assert ref.size == len(block) * count and ref.sha256 == digest
    read = hashlib.sha256()
    with object_store.open("big/object.bin") as handle:
        while chunk := handle.read(1024 * 1024):
            read.update(chunk)
    assert read.hexdigest() == digest


def test_a_failing_payload_leaves_nothing_under_the_key(object_store):
    object_store.put("t/keep", b"old content", "text/plain")

    def broken():
        yield b"a" * (6 * 1024 * 1024)  # past one part on S3: a multipart upload was started
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError):
        object_store.put("t/keep", broken(), "text/plain")
    with pytest.raises(RuntimeError):
        object_store.put("t/new", broken(), "text/plain")
    assert _read(object_store, "t/keep") == b"old content"
    assert not object_store.exists("t/new")
    if object_store.name == "filesystem":
        assert list((object_store.root / ".incoming").iterdir()) == []
    else:
        uploads = object_store.inner.client.list_multipart_uploads(Bucket=object_store.bucket)
        assert uploads.get("Uploads", []) == []


def test_download_urls_serve_the_object(object_store, app_for_store):
    object_store.put("exports/9/file.csv", b"a,b\n1,2\n", "text/csv")
    url = object_store.url_for("exports/9/file.csv", 60, filename="file.csv")
    if object_store.name == "filesystem":
        response = app_for_store(object_store).test_client().get(url)
        assert response.status_code == 200, response.get_json()
        assert response.data == b"a,b\n1,2\n"
        assert 'filename="file.csv"' in response.headers["Content-Disposition"]
    else:
        with urllib.request.urlopen(url) as response:  # noqa: S310 - loopback test server
            assert response.read() == b"a,b\n1,2\n"


def test_filesystem_links_expire_and_cannot_be_altered(tmp_path, app_for_store):
    from app.object_store import open_object_store
    from tests.support.s3 import store_settings

    store = open_object_store(store_settings(tmp_path, {"backend": "filesystem"}))
    store.put("exports/1/a.csv", b"secret rows", "text/csv")
    client = app_for_store(store).test_client()
    expired = store.url_for("exports/1/a.csv", -1)
    assert client.get(expired).status_code == 403
    assert client.get(expired).get_json()["error"]["code"] == "download_link_expired"
    valid = store.url_for("exports/1/a.csv", 60)
    tampered = valid[:-3] + ("AAA" if not valid.endswith("AAA") else "BBB")
    assert client.get(tampered).status_code == 403
    assert client.get("/api/objects/not-a-token").status_code == 403
    store.delete("exports/1/a.csv")
    assert client.get(valid).status_code == 404
    time.sleep(0)  # links carry their own expiry; nothing here waits for a clock


def test_bounded_deleter_settles_every_key_in_input_order(object_store, engine):
    keys = [f"t/del-{i}" for i in range(7)]
    for key in keys[::2]:
        object_store.put(key, b"x", "text/plain")
    asked = [*keys, "../bad"]
    results = delete_objects(object_store, asked, concurrency=3, origin="test")
    assert [r.key for r in results] == asked
    assert [r.status for r in results] == [
        "deleted",
        "missing",
        "deleted",
        "missing",
        "deleted",
        "missing",
        "deleted",
        "failed",
    ]
    assert "InvalidObjectKey" in results[-1].error
    assert not any(object_store.exists(k) for k in keys)
