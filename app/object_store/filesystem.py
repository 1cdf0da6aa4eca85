"""The filesystem object store: objects as files under one root directory (EXP-3).

The default store, so a single machine needs nothing else: the root is
``[object_store] root`` or ``<data_dir>/objects``. A key maps to the path of
its segments under the root (keys are validated first, so no key can leave
it). A write goes to a temporary file in ``<root>/.incoming`` on the same
file system, is flushed to disk and only then renamed over the final path: a
crash leaves at most a stray temporary file (removed on the next start),
never half an object under its key.

Download links are netmap URLs (``/api/objects/<token>``) whose token is the
key, the file name offered to the browser and the expiry time, signed with
the server's secret key (itsdangerous); the download route checks the
signature and the expiry before opening the object.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path
from typing import Any, BinaryIO

from itsdangerous import BadSignature, URLSafeSerializer

from app.object_store.port import (
    ObjectNotFound,
    ObjectRef,
    Payload,
    iter_chunks,
    validate_key,
)

INCOMING = ".incoming"
DOWNLOAD_SALT = "netmap-object-download"
DOWNLOAD_PATH = "/api/objects/"


class DownloadLinkInvalid(Exception):
    """The token is not ours, was altered, or has expired."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def _serializer(secret_key: str) -> URLSafeSerializer:
    return URLSafeSerializer(secret_key, salt=DOWNLOAD_SALT)


def read_download_token(secret_key: str, token: str, *, now: float | None = None) -> dict[str, Any]:
    """The signed ``{"k": key, "e": expiry, "f": filename}``; raises ``DownloadLinkInvalid``."""
    try:
        payload = _serializer(secret_key).loads(token)
    except BadSignature:
        raise DownloadLinkInvalid("bad_signature") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("k"), str):
        raise DownloadLinkInvalid("bad_signature")
    if float(payload.get("e", 0)) <= (time.time() if now is None else now):
        raise DownloadLinkInvalid("expired")
    validate_key(payload["k"])
    return payload


class FilesystemObjectStore:
    name = "filesystem"

    def __init__(self, root: Path, *, secret_key: str):
        self.root = Path(root).resolve()
        self._secret_key = secret_key
        self._incoming = self.root / INCOMING
        self._incoming.mkdir(parents=True, exist_ok=True)
        self._remove_stale_incoming()

    def _remove_stale_incoming(self) -> None:
        # Leftovers of writes that crashed more than an hour ago; younger ones may be live.
        cutoff = time.time() - 3600
        for entry in self._incoming.iterdir():
            with contextlib.suppress(OSError):
                if entry.stat().st_mtime < cutoff:
                    entry.unlink()

    def path_of(self, key: str) -> Path:
        path = self.root.joinpath(*validate_key(key).split("/"))
        # Defence in depth: validation already excludes every way out of the root.
        if self.root not in path.parents:
            raise ValueError("key resolves outside the store root")
        return path

    def put(self, key: str, payload: Payload, content_type: str) -> ObjectRef:
        final = self.path_of(key)
        digest = hashlib.sha256()
        size = 0
        fd, temp_name = _mkstemp(self._incoming)
        try:
            with os.fdopen(fd, "wb") as handle:
                for chunk in iter_chunks(payload):
                    handle.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                handle.flush()
                os.fsync(handle.fileno())
            final.parent.mkdir(parents=True, exist_ok=True)
            os.replace(temp_name, final)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp_name)
            raise
        _fsync_directory(final.parent)
        return ObjectRef(key=key, size=size, sha256=digest.hexdigest(), content_type=content_type)

    def open(self, key: str) -> BinaryIO:
        try:
            return open(self.path_of(key), "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def delete(self, key: str) -> bool:
        path = self.path_of(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError):
            return False
        self._prune_empty_parents(path.parent)
        return True

    def _prune_empty_parents(self, directory: Path) -> None:
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return  # not empty (or raced with a writer): leave it
            directory = directory.parent

    def exists(self, key: str) -> bool:
        return self.path_of(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self.path_of(key).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            raise ObjectNotFound(key) from None

    def url_for(self, key: str, expires: int, *, filename: str | None = None) -> str:
        validate_key(key)
        payload = {"k": key, "e": int(time.time()) + int(expires)}
        if filename:
            payload["f"] = filename
        return DOWNLOAD_PATH + _serializer(self._secret_key).dumps(payload)

    def close(self) -> None:
        pass


def _mkstemp(directory: Path) -> tuple[int, str]:
    import tempfile

    return tempfile.mkstemp(prefix="put-", suffix=".part", dir=directory)


def _fsync_directory(directory: Path) -> None:
    # The rename is durable only once the directory entry is on disk.
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
