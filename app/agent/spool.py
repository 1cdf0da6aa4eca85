"""The agent's spool: what it must remember to finish an execution after a crash (AGT-3).

One directory per execution attempt (execution id, attempt and the first
characters of its claim token) holds ``execution.json`` (the claim, the upload
id) and every batch body exactly as it will be sent, written atomically
(temporary file, fsync, rename) *before* the request goes out. A restarted
agent re-sends the spooled batches in order with the same identity and
content, so the server answers ``saved: 0`` for those it already confirmed and
stores the rest once. The directory is removed when the execution succeeded,
failed or its lease was lost.

Nothing the server sends names a path unchecked: the directory name is built from
the execution id and attempt (integers) and the claim token's first characters
(hex, the token being a UUID, ``Execution.from_claim``), and every directory is
checked to be a direct child of the spool root before anything is written into
it or removed (``SpoolPathError`` otherwise).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.agent.client import Execution, encode_body
from app.process_lock import LockHeld, hold_lock


class SpoolPathError(Exception):
    """A spool path that would leave the spool root (or is not of the spool's format)."""


_DIRECTORY_NAME = re.compile(r"^execution-[0-9]{1,19}-[0-9]{1,19}-[0-9a-f]{8}$")


def execution_directory_name(execution: Execution) -> str:
    """``execution-<id>-<attempt>-<token prefix>`` from validated parts only."""
    for label, value in (("execution id", execution.id), ("attempt", execution.attempt)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpoolPathError(f"{label} {value!r:.40} is not a positive integer")
    name = f"execution-{execution.id}-{execution.attempt}-{execution.claim_token[:8]}"
    if not _DIRECTORY_NAME.match(name):
        raise SpoolPathError(f"spool directory name {name!r:.80} is not of the spool's format")
    return name


def _child_of(root: Path, directory: Path) -> Path:
    """``directory`` resolved, once checked to be a direct child of ``root`` (resolved)
    whose name is of the spool's format; raises SpoolPathError otherwise."""
    real_root = root.resolve()
    real = directory.resolve()
    if real.parent != real_root or not _DIRECTORY_NAME.match(real.name):
        raise SpoolPathError(f"{directory} is not an execution directory under {real_root}")
    return real


def default_spool_root() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(state) / "netmap-agent"


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


class ExecutionSpool:
    def __init__(self, directory: Path, root: Path):
        self.root = root
        self.directory = _child_of(root, directory)

    @property
    def state_path(self) -> Path:
        return self.directory / "execution.json"

    def load(self) -> dict[str, Any]:
        return json.loads(self.state_path.read_text("utf-8"))

    def batch_path(self, index: int) -> Path:
        return self.directory / f"batch-{index:08d}.json"

    def write_batch(self, index: int, body: dict[str, Any], data: bytes | None = None) -> None:
        """One write and one fsync per batch; ``data``: the body already encoded."""
        _write_atomically(self.batch_path(index), encode_body(body) if data is None else data)

    def batches(self) -> Iterator[tuple[int, dict[str, Any]]]:
        for path in sorted(self.directory.glob("batch-*.json")):
            yield int(path.stem.split("-")[1]), json.loads(path.read_bytes())

    def file(self, name: str) -> Path:
        if "/" in name or name in ("", ".", ".."):
            raise SpoolPathError(f"spool file name {name!r} is not a plain name")
        return self.directory / name

    def remove(self) -> None:
        # Checked again at removal: the directory must still be a child of the root (not,
        # say, replaced by a symbolic link to somewhere else since it was made).
        if self.directory.is_symlink():
            raise SpoolPathError(f"{self.directory} became a symbolic link; not removing it")
        _child_of(self.root, self.directory)
        shutil.rmtree(self.directory, ignore_errors=True)


class SpoolInUse(RuntimeError):
    """Another agent process holds this spool."""


class Spool:
    """The spool root for one server; one ``ExecutionSpool`` per execution attempt.

    One agent process at a time: the root's ``agent.lock`` is held for the process's
    life (the kernel drops it when the process ends, even by ``kill -9``). A second
    agent on the same spool resumed the first one's live execution, ran its scan a
    second time, and stopped with a misleading "lease lost" (``process_lock``)."""

    def __init__(self, root: Path, server: str):
        digest = hashlib.sha256(server.rstrip("/").encode()).hexdigest()[:12]
        self.root = root / f"server-{digest}"
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            self._lock: int | None = hold_lock(self.root / "agent.lock")
        except LockHeld as held:
            raise SpoolInUse(
                f"the spool {root} is in use by another agent (pid {held.holder}); give "
                "each agent its own spool directory (--spool)"
            ) from None

    def close(self) -> None:
        """Let another agent use the spool (this process is done with it)."""
        if self._lock is not None:
            os.close(self._lock)  # closing the descriptor drops the lock
            self._lock = None

    def create(self, execution: Execution, upload_id: str, server: str) -> ExecutionSpool:
        directory = self.root / execution_directory_name(execution)
        _child_of(self.root, directory)  # checked before anything is made
        directory.mkdir(exist_ok=True, mode=0o700)
        spool = ExecutionSpool(directory, self.root)
        state = {"execution": execution.as_dict(), "upload_id": upload_id, "server": server}
        _write_atomically(spool.state_path, json.dumps(state).encode("utf-8"))
        return spool

    def pending(self) -> list[ExecutionSpool]:
        """Executions a previous run of the agent left unfinished, oldest first."""
        found = []
        for directory in sorted(self.root.glob("execution-*")):
            if directory.is_symlink() or not _DIRECTORY_NAME.match(directory.name):
                continue  # not ours: left alone
            spool = ExecutionSpool(directory, self.root)
            if spool.state_path.exists():
                found.append(spool)
            else:  # crashed before the state was written: nothing was sent for it
                spool.remove()
        return found
