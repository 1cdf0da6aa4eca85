"""The agent's progress output on stderr: readable lines, or JSON events (AGT-6).

Text lines are for a person watching a terminal; ``--log-format json`` writes
one JSON object per line with an ``event`` name, like the server's logs. The
claim token and the scanner token are never passed here.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, TextIO


class EventLog:
    def __init__(self, log_format: str = "text", stream: TextIO | None = None):
        if log_format not in ("text", "json"):
            raise ValueError("log format must be text or json")
        self.format = log_format
        self.stream = stream or sys.stderr
        # Reentrant: the SIGTERM handler logs, and may run while this thread is inside emit.
        self._lock = threading.RLock()

    def emit(self, event: str, message: str, **fields: Any) -> None:
        if self.format == "json":
            now = time.time()
            stamp = (
                time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
                + f".{int(now % 1 * 1000):03d}Z"
            )
            line = json.dumps(
                {"ts": stamp, "pid": os.getpid(), "event": event, **fields},
                default=str,
                ensure_ascii=False,
            )
        else:
            line = f"netmap-agent: {message}"
        with self._lock:
            self.stream.write(line + "\n")
            self.stream.flush()
