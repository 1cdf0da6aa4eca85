"""Fixtures for change-analysis tests: ``scans`` over each store adapter (PostgreSQL, ES simulator).

Reuses the projection tests' set-up (real store, test-sized pages) and adds
test-sized analysis leases, so a change set is computed by the same workers
the runner uses.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.analysis import Scans
from tests.support.projection_setup import (  # noqa: F401  (fixtures used by this directory)
    ProjectionSetup,
    backend,
    es_projection,
    pg_projection,
    projection,
)

ANALYSIS_DEFAULTS = {"lease_seconds": 10, "heartbeat_seconds": 3, "retry_base_seconds": 0.05}


def _scans(setup: ProjectionSetup) -> Scans:
    settings = setup.settings.replace(analysis=ANALYSIS_DEFAULTS)
    return Scans(settings=settings, store=setup.store)


@pytest.fixture
def scans(projection: ProjectionSetup) -> Iterator[Scans]:  # noqa: F811
    yield _scans(projection)


@pytest.fixture
def pg_scans(pg_projection: ProjectionSetup) -> Iterator[Scans]:  # noqa: F811
    yield _scans(pg_projection)
