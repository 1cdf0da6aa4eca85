"""The API's description: ``/api/openapi.json`` (OpenAPI 3.1, public, like the docs it is)."""

from __future__ import annotations

from flask import Blueprint, jsonify

from app.http.guards import public
from app.http.openapi import openapi_document

blueprint = Blueprint("api_reference", __name__)


@blueprint.get("/api/openapi.json")
@public
def openapi_json():
    return jsonify(openapi_document())
