"""``netmap up``'s banner: a generated first password is shown once; one the starter chose
through ``NETMAP_ADMIN_PASSWORD`` is not repeated into what may be a kept log."""

from __future__ import annotations

from app.config import load_settings
from app.local_stack import print_banner

SETTINGS, _ = load_settings(env={}, overrides={"security": {"secret_key": "k" * 32}})


def test_a_generated_password_is_shown_once(capsys, monkeypatch):
    monkeypatch.delenv("NETMAP_ADMIN_PASSWORD", raising=False)
    print_banner("http://127.0.0.1:8000", "Gen3rated-pw", SETTINGS, runner=True, text=False)
    out = capsys.readouterr().out
    assert "created with password: Gen3rated-pw" in out


def test_a_chosen_password_is_not_printed(capsys, monkeypatch):
    monkeypatch.setenv("NETMAP_ADMIN_PASSWORD", "Kq7-verde-Plato-19x")
    print_banner("http://127.0.0.1:8000", "Kq7-verde-Plato-19x", SETTINGS, runner=True, text=True)
    out = capsys.readouterr().out
    assert "Kq7-verde-Plato-19x" not in out
    assert "created with the password in NETMAP_ADMIN_PASSWORD" in out
    assert "netmap is up: http://127.0.0.1:8000" in out
