"""Where settings come from besides the file: ``NETMAP_*`` variables and a platform's.

Both are pydantic-settings sources. Environment values are text; each source turns
the text into the declared type (a comma list into a tuple, ``yes``/``off`` into a
bool, digits into a number) before validation, so the models can stay strict for
every source and a TOML string is still not an integer. Text that does not convert
is passed on unchanged and refused by the model with the key's own message.

Environment overrides: every key can be set as ``NETMAP_<SECTION>_<KEY>``
(``NETMAP_ELASTICSEARCH_URL``, ``NETMAP_DATABASE_URL``); a few documented aliases
exist for the secrets operators set most (``NETMAP_SECRET_KEY``,
``NETMAP_TRAFFIC_TOKEN``, ``NETMAP_DATA_DIR``).

Platform conventions: a platform that runs Procfiles hands the app ``PORT``,
``DATABASE_URL``, ``WEB_CONCURRENCY`` and ``REDIS_URL``. They fill the matching keys
only when netmap's own settings (file, ``NETMAP_*`` variables, overrides) leave them
unset, so an operator can always pin a value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_origin

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from app.config.sections import SECTIONS

# Short, documented names for the values operators override most often.
ENV_ALIASES: dict[str, str] = {
    "NETMAP_SECRET_KEY": "security.secret_key",
    "NETMAP_ENCRYPTION_KEY": "security.encryption_key",
    "NETMAP_TRAFFIC_TOKEN": "traffic.ingest_token",
    "NETMAP_DATA_DIR": "server.data_dir",
    "NETMAP_SMTP_PASSWORD": "smtp.password",
    "NETMAP_RATELIMIT_STORAGE_URI": "security.ratelimit_storage_uri",
    "NETMAP_METRICS_TOKEN": "security.metrics_token",
}

# What a Procfile platform (Heroku, Dokku, Scalingo, Render, Railway, Fly) sets, and the key
# each fills when netmap's own settings do not. PORT also moves the bind address to 0.0.0.0,
# because the platform's router reaches the process from outside its loopback interface.
PLATFORM_ENV: dict[str, str] = {
    "PORT": "server.port",
    "DATABASE_URL": "database.url",
    "WEB_CONCURRENCY": "server.web_workers",
    "REDIS_URL": "security.ratelimit_storage_uri",
}
PLATFORM_BIND_HOST = "0.0.0.0"  # noqa: S104 - a platform's router connects from outside

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def from_text(dotted: str, raw: str) -> Any:
    """The typed value of an environment string for ``section.key`` (or ``raw`` itself
    when it does not convert, for the model to refuse with the key's message)."""
    section, _, key = dotted.partition(".")
    kind = SECTIONS[section].model_fields[key].annotation
    if get_origin(kind) is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if kind is bool:
        word = raw.strip().lower()
        return True if word in _TRUE else False if word in _FALSE else raw
    for number in (int, float):
        if kind is number:
            try:
                return number(raw.strip())
            except ValueError:
                return raw
    return raw


def nest(flat: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"server.port": 80}`` -> ``{"server": {"port": 80}}``."""
    nested: dict[str, dict[str, Any]] = {}
    for dotted, value in flat.items():
        section, _, key = dotted.partition(".")
        nested.setdefault(section, {})[key] = value
    return nested


class _TextSource(PydanticBaseSettingsSource):
    """A source of text values keyed by dotted setting names, each with its origin."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]):
        super().__init__(settings_cls)
        self.env = env
        # dotted key -> (text, where it came from)
        self.found: dict[str, tuple[str, str]] = self._find()

    def _find(self) -> dict[str, tuple[str, str]]:
        raise NotImplementedError

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        # Sections are read whole through __call__; a single field is never asked for.
        return self().get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return nest({dotted: from_text(dotted, raw) for dotted, (raw, _) in self.found.items()})

    def origins(self) -> dict[str, str]:
        return {dotted: origin for dotted, (_, origin) in self.found.items()}


class NetmapEnvSource(_TextSource):
    """``NETMAP_<SECTION>_<KEY>`` and the aliases; an alias wins over the generic form."""

    def _find(self) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        for section, model in SECTIONS.items():
            for key in model.model_fields:
                name = f"NETMAP_{section.upper()}_{key.upper()}"
                if name in self.env:
                    found[f"{section}.{key}"] = (self.env[name], f"environment:{name}")
        for alias, dotted in ENV_ALIASES.items():
            if alias in self.env:
                found[dotted] = (self.env[alias], f"environment:{alias}")
        return found


def normalise_platform_database_url(url: str) -> str:
    """Platforms still hand out ``postgres://``, a scheme SQLAlchemy 2 no longer accepts."""
    if url.startswith("postgres://"):
        return "postgresql://" + url[len("postgres://") :]
    return url


class PlatformEnvSource(_TextSource):
    """The platform variables that are set (non-empty), lowest precedence but defaults."""

    def _find(self) -> dict[str, tuple[str, str]]:
        found: dict[str, tuple[str, str]] = {}
        for variable, dotted in PLATFORM_ENV.items():
            raw = self.env.get(variable, "")
            if not raw.strip():
                continue
            if variable == "DATABASE_URL":
                raw = normalise_platform_database_url(raw.strip())
            found[dotted] = (raw, f"platform:{variable}")
        if "server.port" in found:
            found["server.host"] = (PLATFORM_BIND_HOST, "platform:PORT")
        return found

    def yield_port_to(self, netmap_sets_port: bool) -> None:
        """netmap's own port wins, and with it netmap's own (or the default) bind address."""
        if netmap_sets_port:
            self.found.pop("server.port", None)
            self.found.pop("server.host", None)
