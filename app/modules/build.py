"""Building a renderer release: ``netmap modules build-renderer`` (MOD-9).

The artifact is an executable zip application for the host's Python. It holds
only what the worker needs: ``app/renderer`` and the frame protocol
(``app/modules/wire.py``) repackaged under the private package ``nmworker``
(so nothing of the server — Flask, SQLAlchemy, psycopg2, Elasticsearch, SMTP —
is even on its path), plus a vendored copy of Jinja2. The native
dependencies (MarkupSafe with its speedups, nh3, css-inline) are copied at
build time, with their compiled extensions, into the release's ``lib/``
directory (its digest is in the manifest, ``lib_sha256``); the worker runs with
``python -I -S`` and only ``lib/`` added to its path, so the server's
site-packages are never on it and upgrading them never changes a built release
(MOD-9). The interpreter and its standard library are the host's.
Entries are written in a fixed order with fixed timestamps, with precompiled
(unchecked-hash) bytecode beside the sources so the worker starts without
compiling (about 65 ms instead of 150 ms); marshal output is not bit-stable
across builds, so two builds of the same sources may differ in digest. The
release directory is written next to its final place and renamed into it:
releases are immutable and never overwritten.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import py_compile
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from app.modules.releases import (
    ARTIFACT_NAME,
    BUILTIN_RELEASE,
    LIB_DIR,
    MANIFEST_NAME,
    check_release_id,
    lib_digest,
)
from app.renderer.contract import MODULE_NAME, RPC_VERSION

_APP_DIR = Path(__file__).resolve().parent.parent
_RENDERER_FILES = ("__init__.py", "contract.py", "sandbox.py", "render.py", "worker_main.py")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)
_MAIN = b"""import os
import sys

# The release's own native dependencies (run with -I -S: no site-packages at all).
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "lib"))

from nmworker.renderer.worker_main import main

sys.exit(main())
"""
# Distributions copied into lib/ with their compiled extensions (import names).
NATIVE_DISTRIBUTIONS = {"MarkupSafe": "markupsafe", "nh3": "nh3", "css-inline": "css_inline"}


class BuildError(Exception):
    pass


def _pyc(source: bytes, name: str) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "module.py"
        src.write_bytes(source)
        out = Path(tmp) / "module.pyc"
        py_compile.compile(
            str(src),
            cfile=str(out),
            dfile=name,
            doraise=True,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        return out.read_bytes()


def _entries(release_id: str, test_faults: dict[str, Any] | None) -> list[tuple[str, bytes]]:
    entries: list[tuple[str, bytes]] = [("__main__.py", _MAIN)]
    entries.append(("nmworker/__init__.py", b'"""Renderer worker (built release)."""\n'))
    entries.append(("nmworker/modules/__init__.py", b'"""Frame protocol."""\n'))
    entries.append(("nmworker/modules/wire.py", (_APP_DIR / "modules" / "wire.py").read_bytes()))
    for name in _RENDERER_FILES:
        entries.append((f"nmworker/renderer/{name}", (_APP_DIR / "renderer" / name).read_bytes()))
    info = {"release_id": release_id, "test_faults": test_faults, "module": MODULE_NAME}
    entries.append(
        ("nmworker/renderer/_build_info.json", json.dumps(info, sort_keys=True).encode())
    )
    spec = importlib.util.find_spec("jinja2")
    if spec is None or spec.origin is None:
        raise BuildError("jinja2 is not installed in the build environment")
    jinja_dir = Path(spec.origin).parent
    for path in sorted(jinja_dir.rglob("*")):
        if path.is_file() and path.suffix in {".py", ".typed"} and "__pycache__" not in path.parts:
            entries.append((f"jinja2/{path.relative_to(jinja_dir).as_posix()}", path.read_bytes()))
    compiled = [
        (name[:-3] + ".pyc", _pyc(data, name))
        for name, data in entries
        if name.endswith(".py") and name != "__main__.py"
    ]
    return sorted(entries + compiled)


def copy_native_dependencies(lib: Path) -> str:
    """Copy the native distributions' package files into ``lib``; their tree digest."""
    import importlib.metadata

    for distribution, package in NATIVE_DISTRIBUTIONS.items():
        try:
            files = importlib.metadata.distribution(distribution).files or []
        except importlib.metadata.PackageNotFoundError:
            raise BuildError(f"{distribution} is not installed in the build environment") from None
        copied = 0
        for entry in files:
            parts = entry.parts
            # The package and its metadata (the worker reports the versions it runs).
            wanted = parts and (parts[0] == package or parts[0].endswith(".dist-info"))
            if not wanted or "__pycache__" in parts or parts[-1] == "RECORD":
                continue
            source = Path(entry.locate())
            target = lib.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            copied += 1
        if not copied:
            raise BuildError(f"{distribution} has no files under {package}/")
    return lib_digest(lib)


def build_renderer_artifact(release_id: str, *, test_faults: dict[str, Any] | None = None) -> bytes:
    buffer = io.BytesIO()
    buffer.write(f"#!{sys.executable} -I\n".encode())
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in _entries(release_id, test_faults):
            info = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return buffer.getvalue()


def build_renderer_release(
    release_id: str, out_dir: Path, *, test_faults: dict[str, Any] | None = None
) -> Path:
    """Write ``out_dir/release_id/{manifest.json, nm-report-render-worker}``; returns that dir.

    ``test_faults`` (tests only, never offered on the command line) builds a worker that
    misbehaves on request: a dict enables the ``fault:…`` template versions, and
    ``{"exit_after_self_test": True}`` makes it exit right after answering the self-test.
    """
    check_release_id(release_id)
    if release_id == BUILTIN_RELEASE:
        raise BuildError("'builtin' is reserved for the in-process renderer")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / release_id
    if target.exists():
        raise BuildError(f"{target} already exists (releases are immutable; use a new release id)")
    artifact = build_renderer_artifact(release_id, test_faults=test_faults)
    staging = Path(tempfile.mkdtemp(prefix=f".{release_id}.", dir=out_dir))
    try:
        artifact_path = staging / ARTIFACT_NAME
        artifact_path.write_bytes(artifact)
        os.chmod(artifact_path, 0o555)  # noqa: S103 - an executable, read-only release file
        lib_sha256 = copy_native_dependencies(staging / LIB_DIR)
        for path in sorted((staging / LIB_DIR).rglob("*"), reverse=True):  # read-only
            os.chmod(path, 0o555 if path.is_dir() else 0o444)
        os.chmod(staging / LIB_DIR, 0o555)  # noqa: S103 - read by the service account
        manifest = {
            "release_id": release_id,
            "artifact_sha256": hashlib.sha256(artifact).hexdigest(),
            "lib_sha256": lib_sha256,
            "module": MODULE_NAME,
            "rpc_version": RPC_VERSION,
        }
        (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        os.chmod(staging / MANIFEST_NAME, 0o444)
        os.chmod(staging, 0o755)  # noqa: S103 - the service account must read the release
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
