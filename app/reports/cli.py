"""`netmap reports …`: storing the SMTP password encrypted at rest (IDN-5, REP-6).

``set-smtp-password`` reads the password from standard input (or a prompt)
and stores it Fernet-encrypted in ``stored_secrets`` under ``smtp.password``;
the delivery job uses it when ``[smtp] password`` is not set in the config,
so the password never has to sit in a config file.
"""

from __future__ import annotations

import click


@click.group("reports")
def reports() -> None:
    """Report mail settings."""


@reports.command("set-smtp-password")
@click.option("--password-stdin", is_flag=True, help="Read the password from standard input.")
@click.pass_obj
def set_smtp_password(state, password_stdin: bool) -> None:
    """Store the SMTP password encrypted at rest (never printed, never logged)."""
    from app.cli_support import database_for_command, print_json, read_password
    from app.db import transaction
    from app.identity.secrets_at_rest import SecretBox, put_secret
    from app.reports.delivery import SMTP_PASSWORD_SECRET

    password = read_password(password_stdin)
    if not password:
        raise click.UsageError("the password must not be empty")
    settings = state.settings()
    security = settings.security
    if not security.encryption_key:
        # The server's key: configured, or the one `netmap up` generated in the data directory.
        from app.cli_support import existing_secret_key

        key = existing_secret_key(settings)
        if key is None:
            raise click.ClickException(
                "no secret key to encrypt with: set NETMAP_SECRET_KEY (or [security] "
                "secret_key) as the server has it, or start `netmap up` once so that it "
                f"generates {settings.data_dir / 'secret_key'}"
            )
        security = security.replace(secret_key=key)
    with database_for_command(settings):
        with transaction() as conn:
            put_secret(conn, SecretBox(security), SMTP_PASSWORD_SECRET, password, user_id=None)
    print_json({"stored": SMTP_PASSWORD_SECRET})
