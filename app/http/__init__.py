"""HTTP surface: one blueprint per area; blueprints only translate requests and results."""

from __future__ import annotations

from flask import Flask


def register_blueprints(app: Flask) -> None:
    from app.http import (
        admin,
        alerts,
        api_reference,
        assets,
        auth,
        changes,
        exports,
        front_door,
        health,
        hosts,
        imports,
        modules,
        reports,
        runs,
        scanner,
        scanners_admin,
        searches,
        system,
        tasks,
        traffic,
        uploads,
    )

    for module in (
        front_door,
        api_reference,
        health,
        auth,
        admin,
        tasks,
        runs,
        assets,
        changes,
        scanner,
        scanners_admin,
        uploads,
        modules,
        traffic,
        exports,
        system,
        imports,
        reports,
        alerts,
        searches,
        hosts,
    ):
        app.register_blueprint(module.blueprint)
