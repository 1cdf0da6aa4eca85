"""Checks that span keys (a heartbeat against its lease, a bucket for the S3 store…).

They run once every key is valid on its own, on the built settings.
"""

from __future__ import annotations

import ipaddress
import re

from app.config.problems import ConfigProblem
from app.config.sections import SecuritySettings, Settings
from app.special_use import SPECIAL_USE_CLASSES

_SECURITY_DEFAULTS = {
    name: SecuritySettings.model_fields[name].default
    for name in ("login_rate_limit", "login_username_rate_limit", "admin_rate_limit")
}


# A leased job renews at least three times a lease, so one late renewal does not lose it.
_HEARTBEATS = (
    ("elasticsearch", "projection_heartbeat_seconds", "projection_lease_seconds"),
    ("analysis", "heartbeat_seconds", "lease_seconds"),
    ("exports", "heartbeat_seconds", "lease_seconds"),
)


def _heartbeat_within_lease(
    settings: Settings, section: str, heartbeat_key: str, lease_key: str
) -> ConfigProblem | None:
    values = getattr(settings, section)
    heartbeat, lease = getattr(values, heartbeat_key), getattr(values, lease_key)
    if heartbeat * 3 <= lease:
        return None
    return ConfigProblem(
        f"{section}.{heartbeat_key}",
        heartbeat,
        f"must be at most {section}.{lease_key} / 3 (= {lease / 3:g})",
    )


def _encryption_key_checks(value: str) -> list[ConfigProblem]:
    """Each comma-separated key must be a Fernet key; found at start-up, not when the
    first secret is stored or read (the value is a secret: never repeated)."""
    from cryptography.fernet import Fernet

    for position, key in enumerate((k.strip() for k in value.split(",")), start=1):
        if not key and value.strip():
            continue  # a stray comma
        if not key:
            return []
        try:
            Fernet(key)
        except ValueError:
            return [
                ConfigProblem(
                    "security.encryption_key",
                    "<set>",
                    f"key {position} is not a Fernet key (32 url-safe base64-encoded bytes; "
                    "make one with: python3 -c 'from cryptography.fernet import Fernet; "
                    "print(Fernet.generate_key().decode())')",
                )
            ]
    return []


def cross_checks(settings: Settings) -> tuple[list[ConfigProblem], list[ConfigProblem]]:
    errors: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    for section, heartbeat, lease in _HEARTBEATS:
        problem = _heartbeat_within_lease(settings, section, heartbeat, lease)
        if problem is not None:
            errors.append(problem)
    prefix = settings.elasticsearch.index_prefix
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,63}", prefix):
        errors.append(
            ConfigProblem(
                "elasticsearch.index_prefix",
                prefix,
                "must be 1-64 characters of a-z, 0-9, '.', '_', '-' (Elasticsearch index names)",
            )
        )
    if settings.smtp.security == "auto" and settings.smtp.ssl and settings.smtp.starttls:
        errors.append(
            ConfigProblem("smtp.starttls", True, "must be false when smtp.ssl is true (pick one)")
        )
    errors.extend(_traffic_checks(settings))
    errors.extend(_encryption_key_checks(settings.security.encryption_key))
    for name in settings.scan.special_use_targets:
        if name not in SPECIAL_USE_CLASSES:
            errors.append(
                ConfigProblem(
                    "scan.special_use_targets",
                    name,
                    "must be one of " + ", ".join(SPECIAL_USE_CLASSES),
                )
            )
    for network in settings.agent.allowed_networks:
        try:
            ipaddress.ip_network(network.strip(), strict=False)
        except ValueError as exc:
            errors.append(ConfigProblem("agent.allowed_networks", network, str(exc)))
    errors.extend(_object_store_checks(settings))
    tz = settings.traffic.timezone
    try:
        from app.timezones import parse_timezone

        parse_timezone(tz)
    except ValueError as exc:
        errors.append(ConfigProblem("traffic.timezone", tz, str(exc)))
    for limit_key in ("login_rate_limit", "login_username_rate_limit", "admin_rate_limit"):
        value = getattr(settings.security, limit_key)
        if value == _SECURITY_DEFAULTS[limit_key]:
            continue  # valid; and commands that never serve HTTP need not import `limits`
        try:
            from limits import parse_many

            parse_many(value)
        except ValueError:
            errors.append(
                ConfigProblem(
                    f"security.{limit_key}",
                    value,
                    "must be a rate limit such as '10 per minute' or '5/second;100/hour'",
                )
            )
    storage = settings.security.ratelimit_storage_uri
    if storage.startswith(("redis://", "rediss://", "redis+")):
        try:
            import redis  # noqa: F401 - only whether the optional client is installed
        except ImportError:
            errors.append(
                ConfigProblem(
                    "security.ratelimit_storage_uri",
                    storage,
                    "a Redis store needs the redis client: pip install 'netmap[redis]'",
                )
            )
    if settings.database.url and not settings.database.url.startswith(("postgresql", "postgres")):
        errors.append(
            ConfigProblem("database.url", settings.database.url, "must be a postgresql:// URL")
        )
    return errors, warnings


DOMAIN_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?$")


def _object_store_checks(settings: Settings) -> list[ConfigProblem]:
    store = settings.object_store
    problems: list[ConfigProblem] = []
    if store.backend == "s3" and not store.bucket:
        problems.append(
            ConfigProblem("object_store.bucket", "", "required when object_store.backend = 's3'")
        )
    if store.endpoint_url and not store.endpoint_url.startswith(("http://", "https://")):
        problems.append(
            ConfigProblem(
                "object_store.endpoint_url", store.endpoint_url, "must be an http(s):// URL"
            )
        )
    if bool(store.access_key_id) != bool(store.secret_access_key):
        problems.append(
            ConfigProblem(
                "object_store.secret_access_key",
                "",
                "set both access_key_id and secret_access_key, or neither "
                "(then the AWS environment variables or profile are used)",
            )
        )
    return problems


def _traffic_checks(settings: Settings) -> list[ConfigProblem]:
    traffic = settings.traffic
    problems: list[ConfigProblem] = []
    for domain in traffic.domains:
        if not DOMAIN_NAME.match(domain):
            problems.append(
                ConfigProblem("traffic.domains", domain, "must be a host name such as example.com")
            )
    if traffic.enabled and not traffic.domains:
        problems.append(
            ConfigProblem(
                "traffic.domains", [], "must list at least one domain when traffic.enabled is true"
            )
        )
    if not traffic.file_patterns:
        problems.append(ConfigProblem("traffic.file_patterns", [], "must list at least one glob"))
    for pattern in traffic.file_patterns:
        if pattern.count("{domain}") != 1 or "/" in pattern:
            problems.append(
                ConfigProblem(
                    "traffic.file_patterns",
                    pattern,
                    "must be a file-name glob containing {domain} once, e.g. {domain}.access.log*",
                )
            )
    return problems
