"""Personal API tokens from the console (docs/security.md, "API tokens"): make one (its
secret shown once, on the answer to the form, never cached), list one's tokens, revoke
one. The identity service does the work, as for ``/api/auth/tokens``."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for

from app.errors import Conflict, ValidationError
from app.identity import service as identity
from app.observability import emit
from app.web import blueprint
from app.web.access import page_user, signed_in_user

# The form's choices of lifetime; the API takes any number of days from 1 to 3650.
EXPIRY_CHOICES = (("30", "30 days"), ("90", "90 days"), ("365", "a year"), ("", "never"))
ACCESS_CHOICES = (("write", "read and write"), ("read", "read only (GET)"))


@blueprint.route("/tokens", methods=["GET", "POST"])
@page_user
def tokens():
    if request.method == "GET":
        return _tokens_page()
    user = signed_in_user()
    form = {
        "name": request.form.get("name", ""),
        "expires": request.form.get("expires", "90"),
        "access": request.form.get("access", "write"),
    }
    days = form["expires"]
    body = {
        "name": form["name"],
        # Anything but digits goes on as text, for the service to refuse at its field.
        "expires_in_days": (int(days) if days.isdecimal() and len(days) <= 6 else days)
        if days
        else None,
        "access": form["access"],
    }
    try:
        token, secret = identity.create_api_token(user, body, via="console")
    except (ValidationError, Conflict) as refused:
        status = 409 if isinstance(refused, Conflict) else 400
        return _tokens_page(form=form, error=refused.message, status=status)
    emit("ApiTokenCreated", user_id=user.id, token_id=token.id)
    return _tokens_page(created=token, secret=secret, status=201)


@blueprint.post("/tokens/<int:token_id>/revoke")
@page_user
def token_revoke(token_id: int):
    user = signed_in_user()
    identity.revoke_api_token(user, token_id, via="console")
    emit("ApiTokenRevoked", user_id=user.id, token_id=token_id)
    return redirect(url_for("web.tokens"), code=303)


def _tokens_page(*, created=None, secret=None, form=None, error=None, status=200):
    body = render_template(
        "console/tokens.html",
        items=identity.list_api_tokens(signed_in_user().id),
        created=created,
        secret=secret,
        form=form or {"name": "", "expires": "90", "access": "write"},
        error=error,
        expiry_choices=EXPIRY_CHOICES,
        access_choices=ACCESS_CHOICES,
        server_url=request.host_url.rstrip("/"),
    )
    # The secret is on this answer only: no cache may keep it.
    headers = {"Cache-Control": "no-store"} if secret else {}
    return body, status, headers
