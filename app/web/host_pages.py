"""The console's page for one host (issue 37): ``app.http.hosts.host_view`` as HTML."""

from __future__ import annotations

from flask import render_template

from app.http.hosts import host_view
from app.web import blueprint
from app.web.access import page_user, signed_in_user


@blueprint.get("/hosts/<path:ip>")
@page_user
def host_page(ip: str):
    return render_template("console/host.html", host=host_view(signed_in_user(), ip))
