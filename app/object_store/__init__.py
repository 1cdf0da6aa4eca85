"""Object storage: the port, the filesystem and S3 adapters, and the bounded deleter (EXP).

``open_object_store(settings)`` returns the configured adapter
(``[object_store] backend``), wrapped so every operation emits a redacted event
and updates the object-store metrics.
"""

from __future__ import annotations

from pathlib import Path

from app.config import Settings
from app.object_store.events import InstrumentedObjectStore


def filesystem_root(settings: Settings) -> Path:
    root = settings.object_store.root
    return settings.resolve_path(root) if root else settings.data_dir / "objects"


def open_object_store(settings: Settings) -> InstrumentedObjectStore:
    if settings.object_store.backend == "s3":
        from app.object_store.s3 import S3ObjectStore

        return InstrumentedObjectStore(S3ObjectStore(settings.object_store))
    from app.object_store.filesystem import FilesystemObjectStore

    return InstrumentedObjectStore(
        FilesystemObjectStore(filesystem_root(settings), secret_key=settings.security.secret_key)
    )
