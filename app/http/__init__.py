"""HTTP surface: one blueprint per area; blueprints only translate requests and results."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    from app.http import (
        admin,
        assets,
        auth,
        exports,
        health,
        imports,
        modules,
        scanner,
        system,
        tasks,
        traffic,
        uploads,
    )

    for module in (
        health,
        auth,
        admin,
        tasks,
        assets,
        scanner,
        uploads,
        modules,
        traffic,
        exports,
        system,
        imports,
    ):
        app.register_blueprint(module.blueprint)
    from app import web

    app.register_blueprint(web.blueprint)
