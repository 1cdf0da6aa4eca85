"""A lock one process holds on a directory for its whole life: ``netmap up`` on its data
directory, the scanner agent on its spool.

``flock`` on a file in the directory: the kernel drops it when the process ends, even by
``kill -9``, so a crash never leaves a stale lock. The holder writes its pid into the
file, so a refused second process can name the one in the way. Standard library only:
the agent-only install imports it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class LockHeld(RuntimeError):
    """Another process holds the lock; ``holder`` is its pid as it wrote it."""

    def __init__(self, holder: str):
        super().__init__(f"held by pid {holder}")
        self.holder = holder


def hold_lock(path: Path) -> int:
    """Take the lock at ``path`` (created 0600) for this process's life; the descriptor is
    returned (closing it releases the lock). Raises ``LockHeld`` when another has it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise LockHeld(holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
