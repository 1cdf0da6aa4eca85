"""Schemathesis against a live `netmap up` on every documented operation, as an admin, an
owner (a plain user with a task of their own) and a scanner: no 5xx, every status
documented, every body matching its schema.

Examples per operation and role are bounded (NETMAP_SCHEMATHESIS_EXAMPLES, default 1) so
the run fits CI; the document itself is checked route by route in
tests/integration/test_openapi.py.
"""

from __future__ import annotations

import os

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from app.http.openapi import openapi_document
from tests.support.database import unique_name
from tests.support.netmap_server import netmap_server

pytestmark = pytest.mark.e2e

EXAMPLES = int(os.environ.get("NETMAP_SCHEMATHESIS_EXAMPLES", "1"))
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Operations that would end the roles' own sessions midway (they are covered by the
# integration tests of sign-in, password change, disabling users and revoking scanners).
SESSION_ENDING = (
    r"^/api/auth/(logout|password)$|^/api/users/\{user_id\}/disable$"
    r"|^/api/scanners/\{scanner_id\}/disable$"
)

schema = schemathesis.openapi.from_dict(openapi_document()).exclude(path_regex=SESSION_ENDING)


@pytest.fixture(scope="module")
def roles(pg_server, template_db, tmp_path_factory):
    name = unique_name("netmap_st")
    url = pg_server.create_database(name, template_db)
    try:
        with netmap_server(url, tmp_path_factory.mktemp("schemathesis")) as server:
            owner_password = "quiet-harbor-lantern-93"
            created = server.post(
                "/api/users", json={"username": "owner", "password": owner_password}
            )
            assert created.status_code == 201, created.text
            owner = requests.Session()
            login = owner.post(
                server.url + "/api/auth/login",
                json={"username": "owner", "password": owner_password},
                timeout=30,
            )
            assert login.status_code == 200, login.text
            owner_csrf = login.json()["csrf_token"]
            task = owner.post(
                server.url + "/api/tasks",
                json={"name": "owned", "targets": ["192.0.2.1"], "ports": "80"},
                headers={"X-CSRF-Token": owner_csrf},
                timeout=30,
            )
            assert task.status_code == 201, task.text
            token = server.scanner_token("schemathesis")
            yield (
                server.url,
                {
                    "admin": (server.session, {"X-CSRF-Token": server.csrf}),
                    "owner": (owner, {"X-CSRF-Token": owner_csrf}),
                    "scanner": (requests.Session(), {"Authorization": f"Bearer {token}"}),
                },
            )
    finally:
        pg_server.drop_database(name)


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_documented_operations(case, roles):
    # Each generated request is sent once per role: one test per operation keeps the
    # generation cost to one, and every role sees the same inputs.
    base_url, by_role = roles
    for session, headers in by_role.values():
        case.call_and_validate(
            base_url=base_url, session=session, headers=headers, checks=CHECKS, timeout=60
        )
