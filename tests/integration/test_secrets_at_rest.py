"""Secrets at rest are Fernet-encrypted (IDN-5)."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from cryptography.fernet import Fernet

from app.config import SecuritySettings
from app.db import transaction
from app.identity.secrets_at_rest import SecretBox, get_secret, put_secret


def test_secret_round_trip_and_ciphertext_at_rest(engine):
    box = SecretBox(SecuritySettings(secret_key="k" * 40))
    with transaction() as conn:
        put_secret(conn, box, "smtp.password", "hunter2", user_id=None)
    with transaction() as conn:
        stored = conn.execute(sa.text("SELECT ciphertext FROM stored_secrets")).scalar()
        assert "hunter2" not in stored
        assert get_secret(conn, box, "smtp.password") == "hunter2"
        assert get_secret(conn, box, "absent") is None


def test_wrong_key_cannot_decrypt(engine):
    with transaction() as conn:
        put_secret(conn, SecretBox(SecuritySettings(secret_key="a" * 40)), "x", "v", user_id=None)
    with transaction() as conn, pytest.raises(ValueError, match="cannot be decrypted"):
        get_secret(conn, SecretBox(SecuritySettings(secret_key="b" * 40)), "x")


def test_key_rotation_keeps_old_secrets_readable():
    old_key, new_key = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    old = SecretBox(SecuritySettings(encryption_key=old_key))
    ciphertext = old.encrypt("value")
    rotated = SecretBox(SecuritySettings(encryption_key=f"{new_key},{old_key}"))
    assert rotated.decrypt(ciphertext) == "value"
    assert SecretBox(SecuritySettings(encryption_key=new_key)).decrypt(rotated.encrypt("n")) == "n"
