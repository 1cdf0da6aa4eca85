"""Finding and verifying an installed renderer release on disk (MOD-4).

Releases are immutable directories under ``[report_renderer]
releases_directory``: ``<dir>/<release_id>/manifest.json`` (``release_id``,
``artifact_sha256``) beside the fixed executable ``nm-report-render-worker``.
Callers (the admin API included) pass only a release id; this module turns it
into a path after checking the id's syntax, that the directory really lies
inside the releases directory (no ``..``, no symlink leading out), that the
manifest is small, well-formed and names the same release, and that the
artifact's SHA-256 matches. The protocol handshake and self-test come after
(``process``, ``report_render``). The files are trusted only as far as the
directory is: it is installed by deployers and read-only for the service.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from app.modules.errors import CandidateRejected

BUILTIN_RELEASE = "builtin"
ARTIFACT_NAME = "nm-report-render-worker"
MANIFEST_NAME = "manifest.json"
MAX_MANIFEST_BYTES = 4096
RELEASE_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


# The release's own copies of its native dependencies (MOD-9): built by app.modules.build,
# checked here against the manifest's lib_sha256.
LIB_DIR = "lib"


def lib_digest(lib: Path) -> str:
    """SHA-256 over the sorted (relative path, file SHA-256) pairs of ``lib``."""
    digest = hashlib.sha256()
    for path in sorted(p for p in lib.rglob("*") if p.is_file()):
        digest.update(path.relative_to(lib).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return digest.hexdigest()


@dataclass(frozen=True)
class Release:
    release_id: str
    directory: Path
    artifact: Path
    artifact_sha256: str
    # MOD-9: the release carries its native dependencies in lib/ (run without
    # site-packages); False for a release built before, which used the host's.
    self_contained: bool = False


def check_release_id(release_id: object) -> str:
    """The id if it is syntactically a release id (``builtin`` included), else rejected."""
    if not isinstance(release_id, str) or not RELEASE_ID_RE.match(release_id):
        raise CandidateRejected(
            str(release_id)[:80],
            "release id must be 1-64 characters of [A-Za-z0-9._-] starting with a letter or digit",
        )
    if ".." in release_id:
        raise CandidateRejected(release_id, "release id must not contain '..'")
    return release_id


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _regular_file(path: Path, release_id: str, what: str) -> None:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise CandidateRejected(release_id, f"{what} is missing") from None
    if not stat.S_ISREG(info.st_mode):
        raise CandidateRejected(release_id, f"{what} is not a regular file (symlinks not allowed)")


def locate_release(releases_directory: Path | None, release_id: str) -> Release:
    check_release_id(release_id)
    if release_id == BUILTIN_RELEASE:
        raise CandidateRejected(release_id, "builtin is not an installed release")
    if releases_directory is None:
        raise CandidateRejected(
            release_id, "no [report_renderer] releases_directory is configured on this host"
        )
    try:
        root = releases_directory.resolve(strict=True)
    except (FileNotFoundError, RuntimeError):
        raise CandidateRejected(release_id, "the releases directory does not exist") from None
    candidate = root / release_id
    try:
        real = candidate.resolve(strict=True)
    except (FileNotFoundError, RuntimeError):
        raise CandidateRejected(release_id, "release is not installed on this host") from None
    if real != candidate or real.parent != root:
        raise CandidateRejected(release_id, "release directory escapes the releases directory")
    if not real.is_dir():
        raise CandidateRejected(release_id, "release path is not a directory")

    manifest_path = real / MANIFEST_NAME
    _regular_file(manifest_path, release_id, "manifest.json")
    if manifest_path.stat().st_size > MAX_MANIFEST_BYTES:
        raise CandidateRejected(release_id, f"manifest.json exceeds {MAX_MANIFEST_BYTES} bytes")
    try:
        with open(manifest_path, "rb") as handle:
            manifest = json.loads(handle.read(MAX_MANIFEST_BYTES + 1).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise CandidateRejected(release_id, "manifest.json is not valid JSON") from None
    if not isinstance(manifest, dict):
        raise CandidateRejected(release_id, "manifest.json must be an object")
    if manifest.get("release_id") != release_id:
        raise CandidateRejected(release_id, "manifest release_id does not match the directory")
    expected = manifest.get("artifact_sha256")
    if not isinstance(expected, str) or not SHA256_RE.match(expected):
        raise CandidateRejected(release_id, "manifest artifact_sha256 must be 64 lowercase hex")

    artifact = real / ARTIFACT_NAME
    _regular_file(artifact, release_id, ARTIFACT_NAME)
    actual = sha256_file(artifact)
    if not hmac.compare_digest(actual, expected):
        raise CandidateRejected(release_id, "artifact SHA-256 does not match the manifest")
    lib_expected = manifest.get("lib_sha256")
    if lib_expected is not None:
        if not isinstance(lib_expected, str) or not SHA256_RE.match(lib_expected):
            raise CandidateRejected(release_id, "manifest lib_sha256 must be 64 lowercase hex")
        lib = real / LIB_DIR
        if lib.is_symlink() or not lib.is_dir() or lib.resolve().parent != real:
            raise CandidateRejected(release_id, "lib/ is missing or not inside the release")
        if any(p.is_symlink() for p in lib.rglob("*")):
            raise CandidateRejected(release_id, "lib/ must not contain symbolic links")
        if not hmac.compare_digest(lib_digest(lib), lib_expected):
            raise CandidateRejected(release_id, "lib/ SHA-256 does not match the manifest")
    return Release(
        release_id=release_id,
        directory=real,
        artifact=artifact,
        artifact_sha256=actual,
        self_contained=lib_expected is not None,
    )
