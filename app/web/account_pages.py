"""One's own account in the console: who one is, changing one's password, one's sessions
(signing out everywhere else), and the way to one's API tokens (``app/web/token_pages.py``).

The password change is the API's (``POST /api/auth/password``): the current password must
be right, the new one must pass the password policy, every session of the user ends and
this browser gets a new one. Each attempt counts against the sign-in throttle, so a
borrowed session cannot guess the password faster than the sign-in form allows.
"""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.errors import RateLimited, Unauthorized, ValidationError
from app.http.auth import throttle_login
from app.http.guards import session_id, start_session
from app.identity import service as identity
from app.observability import emit
from app.web import blueprint
from app.web.access import page_user, signed_in_user


@blueprint.get("/account")
@page_user
def account():
    ended = request.args.get("ended", "")
    return _account_page(
        changed=request.args.get("changed") == "1",
        ended=int(ended) if ended.isdecimal() and len(ended) <= 6 else None,
    )


@blueprint.post("/account/sessions/end-others")
@page_user
def account_end_other_sessions():
    user = signed_in_user()
    ended = identity.end_other_sessions(user, session_id() or "", via="console")
    emit("OtherSessionsEnded", user_id=user.id, ended=ended)
    return redirect(url_for("web.account", ended=ended), code=303)


@blueprint.post("/account/password")
@page_user
def account_password():
    user = signed_in_user()
    current = request.form.get("current_password", "")
    new = request.form.get("new_password", "")
    if new != request.form.get("repeat_password", ""):
        return _account_page(
            errors={"repeat_password": "The two new passwords differ."}, status=400
        )
    try:
        throttle_login(user.username)
        identity.change_own_password(user.id, current, new, via="console")
    except RateLimited as limited:
        wait = (limited.details or {}).get("retry_after")
        message = f"Too many attempts. Wait {wait} seconds, then try again."
        body, status = _account_page(errors={"current_password": message}, status=429)
        return body, status, {"Retry-After": str(wait)}
    except Unauthorized:
        return _account_page(
            errors={"current_password": "The current password is wrong."}, status=400
        )
    except ValidationError as refused:
        # The policy names what is wrong with the new password in the error's details.
        problem = ((refused.details or {}).get("fields") or {}).get("new_password")
        return _account_page(errors={"new_password": problem or refused.message}, status=400)
    # Every session of the user ended with the change; this browser signs in again.
    start_session(user)
    emit("PasswordChanged", user_id=user.id)
    return redirect(url_for("web.account", changed="1"), code=303)


def _account_page(
    *,
    changed: bool = False,
    ended: int | None = None,
    errors: dict[str, str] | None = None,
    status: int = 200,
):
    sessions, total = identity.live_sessions(signed_in_user().id, session_id() or "")
    body = render_template(
        "console/account.html",
        changed=changed,
        ended=ended,
        errors=errors or {},
        sessions=sessions,
        session_total=total,
    )
    return body, status
