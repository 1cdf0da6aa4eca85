"""Personal API tokens: a user's scripts call the API without a password or a session.

Revision ID: 20261207_2900
Revises: 20261207_2800
Create Date: 2026-12-07

Owned by ``app/identity``:

* ``user_api_tokens``: one row per token a user made (``POST /api/auth/tokens``). Only
  the token's SHA-256 is kept, as for scanner tokens and sessions; ``hint`` is its last
  four characters, so a list can tell tokens apart. A token works while its row exists,
  ``expires_at`` (if any) has not passed and its user is enabled; revoking deletes the
  row. ``access`` is ``write`` (any request the user may make) or ``read`` (GET and HEAD
  only). ``last_used_at`` is refreshed at most once a minute. A user's token names are
  unique, and the user's deletion takes the tokens with it.
"""

from __future__ import annotations

from alembic import op

revision = "20261207_2900"
down_revision = "20261207_2800"
branch_labels = None
depends_on = None

UPGRADE = """
CREATE TABLE user_api_tokens (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id      bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    name         text        NOT NULL CHECK (length(name) BETWEEN 1 AND 100),
    token_sha256 bytea       NOT NULL,
    hint         text        NOT NULL,
    access       text        NOT NULL DEFAULT 'write' CHECK (access IN ('read', 'write')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz
);
CREATE UNIQUE INDEX uq_user_api_tokens_token_sha256 ON user_api_tokens (token_sha256);
CREATE UNIQUE INDEX uq_user_api_tokens_user_name ON user_api_tokens (user_id, name);
"""

DOWNGRADE = """
DROP TABLE IF EXISTS user_api_tokens;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
