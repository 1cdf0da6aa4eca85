"""The agent's spool: what it must remember to finish an execution after a crash (AGT-3).

One directory per execution attempt (execution id, attempt and the first
characters of its claim token) holds ``execution.json`` (the claim, the upload
id) and every batch body exactly as it will be sent, written atomically
(temporary file, fsync, rename) *before* the request goes out. A restarted
agent re-sends the spooled batches in order with the same identity and
content, so the server answers ``saved: 0`` for those it already confirmed and
stores the rest once. The directory is removed when the execution succeeded,
failed or its lease was lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from app.agent.client import Execution, encode_body


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
    def __init__(self, directory: Path):
        self.directory = directory

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
        return self.directory / name

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


class Spool:
    """The spool root for one server; one ``ExecutionSpool`` per execution attempt."""

    def __init__(self, root: Path, server: str):
        digest = hashlib.sha256(server.rstrip("/").encode()).hexdigest()[:12]
        self.root = root / f"server-{digest}"
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def create(self, execution: Execution, upload_id: str, server: str) -> ExecutionSpool:
        directory = (
            self.root / f"execution-{execution.id}-{execution.attempt}-{execution.claim_token[:8]}"
        )
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        spool = ExecutionSpool(directory)
        state = {"execution": execution.as_dict(), "upload_id": upload_id, "server": server}
        _write_atomically(spool.state_path, json.dumps(state).encode("utf-8"))
        return spool

    def pending(self) -> list[ExecutionSpool]:
        """Executions a previous run of the agent left unfinished, oldest first."""
        found = []
        for directory in sorted(self.root.glob("execution-*")):
            spool = ExecutionSpool(directory)
            if spool.state_path.exists():
                found.append(spool)
            else:  # crashed before the state was written: nothing was sent for it
                spool.remove()
        return found
