"""Change alerts: rules, channels and the deliveries outbox (docs/alerts.md).

Revision ID: 20261202_0810
Revises: 20261202_0800
Create Date: 2026-12-02

Owned by ``app/alerts``:

* ``alert_channels``: where messages go (``webhook`` | ``email`` | ``apprise``). Secrets
  (a webhook's signing secret, the previous one during a rotation's overlap, an Apprise
  URL) are stored encrypted with the secrets-at-rest key, never in plain text.
* ``alert_rules``: which changes of whose assets to send where, and how (``each`` |
  ``digest``); the filter as typed arrays so the evaluation is one set-based statement.
* ``alert_deliveries``: one row per message, created in the transaction that commits the
  change set, delivered by the runner under a lease (``claim_token``,
  ``lease_expires_at``); ``id`` is the message id every attempt sends (``webhook-id``).
"""

from alembic import op

revision = "20261202_0810"
down_revision = "20261202_0800"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE alert_channels (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id                bigint      NOT NULL,
    name                    text        NOT NULL,
    kind                    text        NOT NULL CHECK (kind IN ('webhook', 'email', 'apprise')),
    url                     text,
    recipients              text[]      NOT NULL DEFAULT '{}',
    secret_encrypted        text,
    previous_secret_encrypted text,
    previous_secret_until   timestamptz,
    created_at              timestamptz NOT NULL DEFAULT now(),
    updated_at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_alert_channels_owner ON alert_channels (owner_id, id);

CREATE TABLE alert_rules (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id    bigint      NOT NULL,
    is_global   boolean     NOT NULL DEFAULT false,
    name        text        NOT NULL,
    on_kinds    text[]      NOT NULL,
    fields      text[]      NOT NULL DEFAULT '{}',
    cidrs       cidr[]      NOT NULL DEFAULT '{}',
    ports       integer[]   NOT NULL DEFAULT '{}',
    services    text[]      NOT NULL DEFAULT '{}',
    products    text[]      NOT NULL DEFAULT '{}',
    task_ids    bigint[]    NOT NULL DEFAULT '{}',
    tags        text[]      NOT NULL DEFAULT '{}',
    channel_ids bigint[]    NOT NULL,
    mode        text        NOT NULL CHECK (mode IN ('each', 'digest')),
    enabled     boolean     NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_alert_rules_owner ON alert_rules (owner_id, id);
CREATE INDEX ix_alert_rules_enabled ON alert_rules (owner_id) WHERE enabled;

CREATE TABLE alert_deliveries (
    id               text        PRIMARY KEY,
    rule_id          bigint,
    channel_id       bigint      NOT NULL,
    owner_id         bigint      NOT NULL,
    execution_id     bigint,
    task_id          bigint,
    message_kind     text        NOT NULL CHECK (message_kind IN ('each', 'digest', 'test')),
    event_type       text        NOT NULL,
    payload          jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    last_error       text,
    claim_token      uuid,
    lease_expires_at timestamptz,
    available_at     timestamptz NOT NULL DEFAULT now(),
    created_at       timestamptz NOT NULL DEFAULT now(),
    first_attempt_at timestamptz,
    delivered_at     timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ix_alert_deliveries_due ON alert_deliveries (available_at) WHERE status = 'pending';
CREATE INDEX ix_alert_deliveries_owner ON alert_deliveries (owner_id, created_at DESC, id);
CREATE INDEX ix_alert_deliveries_rule ON alert_deliveries (rule_id, created_at DESC, id);
CREATE INDEX ix_alert_deliveries_execution ON alert_deliveries (execution_id);
"""

DOWNGRADE = r"""
DROP TABLE alert_deliveries;
DROP TABLE alert_rules;
DROP TABLE alert_channels;
"""


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute(DOWNGRADE)
