"""The OpenAPI 3.1 description of the JSON API, served at ``/api/openapi.json``.

The document is kept beside the code, one module per area (``auth.py``, ``tasks.py`` …),
each with an ``OPERATIONS`` dict keyed by ``(method, path)``; ``components.py`` holds
the shared schemas and ``build.py`` assembles them. To document a new route, add its
entry to its area's module (or a new module listed in ``build.AREAS``).
tests/integration/test_openapi.py fails when a route has no entry, an entry names no
route, or a route's answer does not match its entry; schemathesis drives every
documented operation against a live server (tests/e2e/test_schemathesis.py).
"""

from __future__ import annotations

from app.http.openapi.build import openapi_document

__all__ = ["openapi_document"]
