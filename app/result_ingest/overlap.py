"""Run one stage of an upload beside the request's own thread.

``background(work)`` starts ``work`` on a new thread with a copy of the caller's
context (so its events carry the upload's span and request id) and returns a
``join`` function: it waits for the work and raises what the work raised, in the
caller's thread, so the caller's error handling does not change. ``inline(work)``
runs it at once and returns the same kind of ``join``, for callers choosing at run
time. A thread per call costs tens of microseconds; it is used for batches whose
writes take hundreds of milliseconds.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable


def background(work: Callable[[], None], *, name: str) -> Callable[[], None]:
    context = contextvars.copy_context()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            context.run(work)
        except BaseException as exc:  # noqa: BLE001 - handed to the joining thread
            failure.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def join() -> None:
        thread.join()
        if failure:
            raise failure[0]

    return join


def inline(work: Callable[[], None]) -> Callable[[], None]:
    work()
    return lambda: None
