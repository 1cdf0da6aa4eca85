"""Server-side sessions and the login throttle counters (IDN-1, IDN-3).

Revision ID: 20261130_0070
Revises: 20261130_0065
Create Date: 2026-11-30

* ``user_sessions``: one row per logged-in browser, keyed by the SHA-256 of the
  random session id the signed cookie carries. Every request looks the row up,
  so deleting it (logout, password change, disabling the user) ends the
  session at once, even for a copy of the cookie.
* ``login_throttle``: fixed-window login attempt counters per address and per
  username, shared by every web process through the database.
"""

from alembic import op

revision = "20261130_0070"
down_revision = "20261130_0065"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE user_sessions (
    id_sha256    bytea       PRIMARY KEY,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);
CREATE INDEX ix_user_sessions_user_id ON user_sessions (user_id);
CREATE INDEX ix_user_sessions_expires_at ON user_sessions (expires_at);

CREATE TABLE login_throttle (
    bucket       text        NOT NULL,
    window_start timestamptz NOT NULL,
    hits         integer     NOT NULL,
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (bucket, window_start)
);
CREATE INDEX ix_login_throttle_expires_at ON login_throttle (expires_at);
"""

DOWNGRADE = r"""
DROP TABLE IF EXISTS login_throttle;
DROP TABLE IF EXISTS user_sessions;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
