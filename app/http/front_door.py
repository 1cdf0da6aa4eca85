"""The site root: ``/`` leads a browser to the console (sign-in first when signed out)."""

from __future__ import annotations

from flask import Blueprint, redirect

from app.http.guards import public

blueprint = Blueprint("front_door", __name__)


@blueprint.get("/")
@public
def root():
    # The console's own guard sends an anonymous visitor on to /console/sign-in.
    return redirect("/console/", code=302)
