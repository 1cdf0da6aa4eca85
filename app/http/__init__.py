"""HTTP surface: one blueprint per area; blueprints only translate requests and results."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    from app.http import (
        admin,
        alerts,
        assets,
        auth,
        changes,
        exports,
        health,
        imports,
        modules,
        reports,
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
        changes,
        scanner,
        uploads,
        modules,
        traffic,
        exports,
        system,
        imports,
        reports,
        alerts,
    ):
        app.register_blueprint(module.blueprint)
    from app import web

    app.register_blueprint(web.blueprint)
