"""The scanners page (WEB-6): the fleet with status badges, create, revoke.

Each scanner shows its status (never seen, online, busy, offline: ``app.scan_control
.fleet``), its last sign of life, what its agent reported (version, host, engines) and
what it is doing. A new scanner's token is shown once, on the page that answers the
create form (never stored, never redirected to, not cached); revoking disables the token
at once. The page calls the same services as the API, which own their transactions.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.errors import ApiError
from app.http import context
from app.http.requests import int_arg
from app.identity.scanners import create_scanner_service, disable_scanner
from app.scan_control.fleet import list_fleet
from app.web import blueprint, error_message
from app.web.access import page_admin, signed_in_user

PAGE_SIZE = 100


def _scanners_page(*, created=None, token=None, error=None, name="", status=200):
    after = int_arg("after", minimum=0) or 0
    items = list_fleet(
        signed_in_user(),
        offline_seconds=context.settings().scan.scanner_offline_seconds,
        limit=PAGE_SIZE + 1,
        after_id=after,
    )
    next_url = (
        url_for("web.scanners", after=items[PAGE_SIZE - 1]["id"])
        if len(items) > PAGE_SIZE
        else None
    )
    body = render_template(
        "console/scanners.html",
        items=items[:PAGE_SIZE],
        created=created,
        token=token,
        error=error,
        name=name,
        next_url=next_url,
        offline_seconds=context.settings().scan.scanner_offline_seconds,
        server_url=request.host_url.rstrip("/"),
    )
    headers = {"Cache-Control": "no-store"} if token else {}
    return body, status, headers


@blueprint.route("/scanners", methods=["GET", "POST"])
@page_admin
def scanners():
    if request.method == "GET":
        return _scanners_page()
    try:
        scanner, token = create_scanner_service(
            request.form.get("name", ""), actor_user_id=signed_in_user().id, via="console"
        )
    except ApiError as refused:
        # Shown again with the name as typed, to be corrected.
        return _scanners_page(
            error=error_message(refused), name=request.form.get("name", ""), status=refused.status
        )
    return _scanners_page(created=scanner, token=token, status=201)


@blueprint.post("/scanners/<int:scanner_id>/revoke")
@page_admin
def scanner_revoke(scanner_id: int):
    disable_scanner(scanner_id, actor_user_id=signed_in_user().id, via="console")
    return redirect(url_for("web.scanners"), code=303)
