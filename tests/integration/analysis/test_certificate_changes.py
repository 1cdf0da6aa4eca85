"""A new certificate fingerprint is a change; a run that read no certificate is not
(issue 37). Over both search stores (the ``scans`` fixture), so the in-database
sightings and the staged ones agree."""

from __future__ import annotations

import sqlalchemy as sa

from app.db import transaction
from tests.support.analysis import Scans

A, B = "aa" * 32, "BB:" * 31 + "BB"


def _cert_changes(execution_id: int) -> list[tuple[str, str | None, str | None]]:
    with transaction() as conn:
        return [
            tuple(row)
            for row in conn.execute(
                sa.text(
                    "SELECT kind, old_cert_sha256, new_cert_sha256 FROM analysis_changes "
                    "WHERE execution_id = :e ORDER BY id"
                ),
                {"e": execution_id},
            )
        ]


def test_a_new_certificate_fingerprint_is_a_change(scans: Scans) -> None:
    owner = scans.owner()
    ip = "10.2.0.1"

    def tls(sha):
        return {"service": "https", "details": {"tls": {"sha256": sha}}}

    first = scans.scan(owner, [ip], [(ip, 443, "tcp", tls(A))])
    scans.settle()
    assert _cert_changes(first) == [("new", None, A)]

    renewed = scans.scan(owner, [ip], [(ip, 443, "tcp", tls(B))])
    scans.settle()
    assert _cert_changes(renewed) == [("changed", A, "bb" * 32)]

    same = scans.scan(owner, [ip], [(ip, 443, "tcp", tls("bb" * 32))])
    scans.settle()
    assert _cert_changes(same) == []

    # A run that read no certificate (a quick profile) changes nothing and keeps it.
    unprobed = scans.scan(owner, [ip], [(ip, 443, "tcp", {"service": "https"})])
    scans.settle()
    assert _cert_changes(unprobed) == []
    again = scans.scan(owner, [ip], [(ip, 443, "tcp", tls(A))])
    scans.settle()
    assert _cert_changes(again) == [("changed", "bb" * 32, A)]
