"""Sign in, sign out, the dashboard and the console's static files (WEB-1, WEB-3).

Signing in goes through the same throttle, password check and server-side
session as ``POST /api/auth/login``; a throttled attempt shows how many seconds
to wait. The dashboard shows only numbers that cost a bounded amount of work
whatever the size of the data: current assets counted up to a cap (more shows
as "10000+"), tasks in flight up to a cap, the projection outbox backlog (one
query on its partial index), the renderer's in-process status, and the new and
gone endpoints of the last 7 days summed over the per-execution change summaries
(at most a thousand executions, never the change rows).
"""

from __future__ import annotations

from pathlib import Path

from flask import redirect, render_template, request, send_from_directory, url_for

from app.analysis.service import recent_change_counts
from app.errors import RateLimited
from app.http import context
from app.http.auth import throttle_login
from app.http.guards import end_session, live_session_user, start_session
from app.identity import service as identity
from app.observability import emit
from app.scan_control.fleet import fleet_online
from app.scan_control.reads import bounded_task_count, scanner_work_waiting
from app.search.port import current_asset_count
from app.web import blueprint
from app.web.access import page_public, page_user, safe_next, signed_in_user

STATIC_DIR = Path(__file__).parent / "static"
ASSET_COUNT_CAP = 10_000
TASK_COUNT_CAP = 100
# New/gone over the last week: summed over at most this many analysed executions.
RECENT_DAYS = 7
RECENT_EXECUTION_CAP = 1_000


@blueprint.get("/static/<path:filename>")
@page_public
def static_file(filename: str):
    response = send_from_directory(STATIC_DIR, filename, max_age=300)
    return response


@blueprint.route("/sign-in", methods=["GET", "POST"])
@page_public
def sign_in():
    target = safe_next(request.values.get("next"))
    if request.method == "GET":
        if live_session_user() is not None:
            return redirect(target or url_for("web.dashboard"))
        return render_template("console/sign_in.html", next=target, error=None, username="")
    username = request.form.get("username", "")
    password = request.form.get("password", "")
    try:
        throttle_login(username or None)
    except RateLimited as limited:
        wait = (limited.details or {}).get("retry_after")
        message = f"Too many sign-in attempts. Wait {wait} seconds, then try again."
        body = render_template(
            "console/sign_in.html", next=target, error=message, username=username
        )
        return body, 429, {"Retry-After": str(wait)}
    user = None
    if username and password:
        user = identity.check_credentials(username, password)
    if user is None:
        emit("LoginFailed")
        body = render_template(
            "console/sign_in.html",
            next=target,
            error="Wrong username or password.",
            username=username,
        )
        return body, 401
    start_session(user)
    emit("LoginSucceeded", user_id=user.id)
    return redirect(target or url_for("web.dashboard"), code=303)


@blueprint.post("/sign-out")
@page_user
def sign_out():
    emit("Logout", user_id=signed_in_user().id)
    end_session()
    return redirect(url_for("web.sign_in"), code=303)


@blueprint.get("/")
@page_user
def dashboard():
    user = signed_in_user()
    store = context.store()
    counter = current_asset_count(store)
    assets = None
    if counter is not None:
        count = counter.count_current_assets(owner_id=user.id, cap=ASSET_COUNT_CAP)
        assets = {"count": min(count, ASSET_COUNT_CAP), "more": count > ASSET_COUNT_CAP}
    from app.http.assets import FACET_SAMPLE
    from app.search.port import AssetQuery
    from app.search.query_language import quoted

    # Every store answers facets (a port method, not an optional ability).
    found = store.asset_facets(
        AssetQuery(scope="user", owner_id=user.id), size=5, sample=FACET_SAMPLE
    )
    # Each value links to the asset search that finds it.
    facets = {
        "sampled": found.sampled,
        "capped": found.capped,
        "fields": {
            name: [(value, count, f"{name}:{quoted(value)}") for value, count in values]
            for name, values in found.facets.items()
        },
    }
    recent = recent_change_counts(user.id, days=RECENT_DAYS, execution_cap=RECENT_EXECUTION_CAP)
    running = bounded_task_count(user, "running", cap=TASK_COUNT_CAP)
    queued = bounded_task_count(user, "queued", cap=TASK_COUNT_CAP)
    # Work waits and nobody will take it: say so, with the command that starts a scanner.
    no_scanner = scanner_work_waiting(user) and not fleet_online(
        offline_seconds=context.settings().scan.scanner_offline_seconds
    )
    # Nothing to show yet: say how to start (only asked while no task is queued or running).
    first_steps = not (queued[0] or running[0]) and not bounded_task_count(user, None, cap=1)[0]
    backlog = renderer = None
    if user.is_admin:
        from app.projection.outbox import backlog as outbox_backlog

        backlog = outbox_backlog()
        service = context.report_renderer()
        renderer = service.status() if service is not None else None
    return render_template(
        "console/dashboard.html",
        assets=assets,
        facets=facets,
        recent=recent,
        recent_days=RECENT_DAYS,
        running=running,
        queued=queued,
        no_scanner=no_scanner,
        first_steps=first_steps,
        server_url=request.host_url.rstrip("/"),
        backlog=backlog,
        renderer=renderer,
    )
