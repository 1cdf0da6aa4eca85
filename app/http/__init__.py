"""HTTP surface: one blueprint per area; blueprints only translate requests and results."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    from app.http import admin, auth, health, scanner, tasks

    for module in (health, auth, admin, tasks, scanner):
        app.register_blueprint(module.blueprint)
    from app.http.traffic import blueprint as traffic_blueprint  # traffic rollups (TRF-6/7)

    app.register_blueprint(traffic_blueprint)
