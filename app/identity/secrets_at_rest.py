"""Secrets at rest (IDN-5): values such as SMTP passwords are stored Fernet-encrypted.

The key is ``[security] encryption_key`` (a Fernet key, or several separated
by commas for rotation: the first encrypts, all decrypt). When it is not set,
a key is derived from ``secret_key`` with HKDF so one configured secret is
enough; rotating ``secret_key`` then requires re-encrypting stored secrets.
"""

from __future__ import annotations

import base64

import sqlalchemy as sa
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from sqlalchemy.engine import Connection

from app.config import SecuritySettings


class SecretBox:
    def __init__(self, security: SecuritySettings):
        keys = [k.strip() for k in security.encryption_key.split(",") if k.strip()]
        if not keys:
            if not security.secret_key:
                raise ValueError("security.secret_key or security.encryption_key must be set")
            keys = [derive_fernet_key(security.secret_key)]
        self._fernet = MultiFernet([Fernet(k) for k in keys])

    def encrypt(self, plaintext: str) -> str:
        return self._fernet.encrypt(plaintext.encode("utf-8")).decode("ascii")

    def decrypt(self, ciphertext: str) -> str:
        try:
            return self._fernet.decrypt(ciphertext.encode("ascii")).decode("utf-8")
        except InvalidToken:
            raise ValueError("stored secret cannot be decrypted with the configured key") from None


def derive_fernet_key(secret_key: str) -> bytes:
    raw = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=b"netmap-secrets-at-rest", info=b"fernet"
    ).derive(secret_key.encode("utf-8"))
    return base64.urlsafe_b64encode(raw)


def put_secret(
    conn: Connection, box: SecretBox, name: str, value: str, *, user_id: int | None
) -> None:
    conn.execute(
        sa.text(
            """
            INSERT INTO stored_secrets (name, ciphertext, updated_by) VALUES (:n, :c, :u)
            ON CONFLICT (name) DO UPDATE
               SET ciphertext = EXCLUDED.ciphertext, updated_by = EXCLUDED.updated_by,
                   updated_at = now()
            """
        ),
        {"n": name, "c": box.encrypt(value), "u": user_id},
    )


def get_secret(conn: Connection, box: SecretBox, name: str) -> str | None:
    ciphertext = conn.execute(
        sa.text("SELECT ciphertext FROM stored_secrets WHERE name = :n"), {"n": name}
    ).scalar()
    return None if ciphertext is None else box.decrypt(ciphertext)
