"""Wrapping a real search store in tests: record calls, gate them, or make them fail.

The store underneath is real (PostgreSQL or the Elasticsearch simulator); only
the moment or outcome of a call is controlled, the way a slow or failing
cluster would behave.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ControlledStore:
    def __init__(self, inner: Any):
        self.inner = inner
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.before: dict[str, Callable[..., None]] = {}
        self.after: dict[str, Callable[..., None]] = {}  # called once the real call returned

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, args, kwargs))
            hook = self.before.get(name)
            if hook is not None:
                hook(*args, **kwargs)
            result = attr(*args, **kwargs)
            done = self.after.get(name)
            if done is not None:
                done(*args, **kwargs)
            return result

        return call


def install(app, inner: Any | None = None) -> ControlledStore:
    """Wrap the store ``create_app`` opened (or put ``inner`` in its place, closing it)."""
    from app.http import context

    opened = app.extensions[context.STORE]
    if inner is not None and inner is not opened:
        opened.close()
    store = ControlledStore(inner if inner is not None else opened)
    app.extensions[context.STORE] = store
    return store
