"""``small_pool_app``: an app whose engine has ONE pooled connection, for the tests that
prove no connection is held across store I/O and that a pool timeout is a 503.

With a pool of one, any code path that keeps its connection while it waits for the
search store blocks every other transaction, so the rule (docs/architecture.md, rule:
short transactions) becomes a test that fails. Registered for the whole suite by the
root conftest (``pytest_plugins``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from app.config import Settings
from tests.support.api import Api
from tests.support.settings import make_settings


@dataclass
class SmallPoolApp:
    app: Any  # flask.Flask
    engine: Engine
    settings: Settings
    api: Api


@pytest.fixture
def small_pool_app(database_url, tmp_path) -> Iterator[Callable[..., SmallPoolApp]]:
    """``small_pool_app(pool_timeout_seconds=5, **sections)``: create_app on a one-connection
    pool (installed as the process engine), closed and disposed after the test."""
    from app import close_app, create_app, db

    made: list[SmallPoolApp] = []

    def make(*, pool_timeout_seconds: float = 5, **sections: dict) -> SmallPoolApp:
        database = {"pool_size": 1, "max_overflow": 0, "pool_timeout_seconds": pool_timeout_seconds}
        settings = make_settings(database_url, tmp_path, database=database, **sections)
        engine = db.create_engine(database_url, settings.database)
        app = create_app(settings, engine=engine, modules="off")
        made.append(SmallPoolApp(app, engine, settings, Api(app)))
        return made[-1]

    yield make
    for small in made:
        close_app(small.app)
        small.engine.dispose()

    db.set_engine(None)
