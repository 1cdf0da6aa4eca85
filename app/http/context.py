"""Per-application objects the blueprints need: the settings and the search store."""

from __future__ import annotations

from flask import current_app

from app.config import Settings
from app.search.port import SearchStore


def settings() -> Settings:
    return current_app.extensions["netmap.settings"]


def store() -> SearchStore:
    """The configured search store, opened on first use (tests may install their own)."""
    existing = current_app.extensions.get("netmap.store")
    if existing is None:
        from app.search import open_store

        existing = open_store(settings())
        current_app.extensions["netmap.store"] = existing
    return existing
