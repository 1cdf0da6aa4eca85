"""Acting as users, admins and scanners against the app in tests.

Users and scanners are created through the domain services (a real commit);
requests go through the Flask test client with the real session cookie and
CSRF header, exactly as a browser or scanner would send them.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Any
from unittest import mock

from flask import Flask
from flask.testing import FlaskClient
from werkzeug.security import generate_password_hash

from app.db import transaction
from app.identity.scanners import create_scanner
from app.identity.users import create_user

_counter = itertools.count(1)
DEFAULT_PASSWORD = "correct horse battery staple"

# The product hashes passwords with scrypt at its full cost (app.identity.users), about
# 0.1 CPU-s per hash and again per sign-in: thousands of test users made that minutes of
# the suite. Users made here get a hash of the same scheme at a cost of 2**10, once per
# password; werkzeug reads the cost from the stored hash, so signing in checks it cheaply
# too. Passwords set or changed through the product (the account routes, the CLI) are
# hashed at full cost as always, and tests/unit and the account tests check that.
_TEST_HASH_METHOD = "scrypt:1024:8:1"


@functools.cache
def _test_password_hash(password: str, method: str = "") -> str:
    return generate_password_hash(password, method=_TEST_HASH_METHOD)


@dataclass
class UserSession:
    client: FlaskClient
    user: dict[str, Any]
    csrf: str
    password: str

    @property
    def id(self) -> int:
        return self.user["id"]

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        merged = {"X-CSRF-Token": self.csrf}
        merged.update(headers or {})
        return merged

    def get(self, path: str, **kwargs: Any):
        return self.client.get(path, **kwargs)

    def post(
        self, path: str, json: Any = None, headers: dict[str, str] | None = None, **kwargs: Any
    ):
        return self.client.post(path, json=json, headers=self._headers(headers), **kwargs)

    def put(
        self, path: str, json: Any = None, headers: dict[str, str] | None = None, **kwargs: Any
    ):
        return self.client.put(path, json=json, headers=self._headers(headers), **kwargs)

    def patch(
        self, path: str, json: Any = None, headers: dict[str, str] | None = None, **kwargs: Any
    ):
        return self.client.patch(path, json=json, headers=self._headers(headers), **kwargs)

    def delete(self, path: str, headers: dict[str, str] | None = None, **kwargs: Any):
        return self.client.delete(path, headers=self._headers(headers), **kwargs)


@dataclass
class ScannerClient:
    client: FlaskClient
    id: int
    name: str
    token: str

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        merged = {"Authorization": f"Bearer {self.token}"}
        merged.update(headers or {})
        return merged

    def post(
        self, path: str, json: Any = None, headers: dict[str, str] | None = None, **kwargs: Any
    ):
        return self.client.post(path, json=json, headers=self._headers(headers), **kwargs)

    def get(self, path: str, headers: dict[str, str] | None = None, **kwargs: Any):
        return self.client.get(path, headers=self._headers(headers), **kwargs)

    def claim(self, **body: Any):
        return self.post("/api/scanner/claim", json=body or None)


class Api:
    def __init__(self, app: Flask):
        self.app = app

    def create_user(
        self, username: str | None = None, *, admin: bool = False, password: str = DEFAULT_PASSWORD
    ) -> dict[str, Any]:
        username = username or f"user{next(_counter)}"
        with (
            mock.patch("app.identity.users.generate_password_hash", _test_password_hash),
            transaction() as conn,
        ):
            user = create_user(conn, username, password, is_admin=admin)
        return {"id": user.id, "username": user.username, "password": password}

    def login(self, username: str, password: str = DEFAULT_PASSWORD) -> UserSession:
        client = self.app.test_client()
        response = client.post("/api/auth/login", json={"username": username, "password": password})
        assert response.status_code == 200, response.get_json()
        body = response.get_json()
        return UserSession(
            client=client, user=body["user"], csrf=body["csrf_token"], password=password
        )

    def user(self, username: str | None = None) -> UserSession:
        created = self.create_user(username)
        return self.login(created["username"])

    def admin(self, username: str | None = None) -> UserSession:
        created = self.create_user(username or f"admin{next(_counter)}", admin=True)
        return self.login(created["username"])

    def scanner(self, name: str | None = None) -> ScannerClient:
        with transaction() as conn:
            scanner, token = create_scanner(conn, name or f"scanner-{next(_counter)}")
        return ScannerClient(
            client=self.app.test_client(), id=scanner.id, name=scanner.name, token=token
        )
