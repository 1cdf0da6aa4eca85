"""Fixtures for projection tests: the worker over each store adapter.

Defined in tests/support/projection_setup.py (the analysis tests use them too)."""

from tests.support.projection_setup import (  # noqa: F401  (fixtures used by this directory)
    backend,
    es_projection,
    pg_projection,
    projection,
)
