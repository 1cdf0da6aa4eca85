"""Loading settings: the file, the environment, a platform and overrides, validated once.

Precedence, highest first: overrides (``netmap up`` options, tests), ``NETMAP_*``
variables, the TOML file (``--config FILE`` or ``$NETMAP_CONFIG``), platform
variables, the built-in defaults. Each source is a pydantic-settings source; the
loader merges them itself so ``ConfigCheck.value_sources`` can record where every
effective value came from (never the value), then validates the merge with the
``Settings`` model. Every problem is reported at once, each naming the key, the
value (secrets redacted) and what would have been accepted.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_args

from annotated_types import Ge, Le
from pydantic import ValidationError
from pydantic_settings import TomlConfigSettingsSource

from app.config.checks import cross_checks
from app.config.problems import ConfigCheck, ConfigError, ConfigProblem
from app.config.sections import SECTIONS, Section, Settings, is_secret
from app.config.sources import NetmapEnvSource, PlatformEnvSource

CONFIG_ENV = "NETMAP_CONFIG"

# What a value of the wrong type is told, by pydantic's error type.
_TYPE_MESSAGES = {
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
}


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def allowed_text(section: str, key: str) -> str:
    """What ``section.key`` accepts, in words ("between 1 and 64", "one of 'a', 'b'")."""
    info = SECTIONS[section].model_fields[key]
    choices = get_args(info.annotation) if info.annotation is not None else ()
    if choices and all(isinstance(c, str) for c in choices):
        return "one of " + ", ".join(repr(c) for c in choices)
    lo = next((m.ge for m in info.metadata if isinstance(m, Ge)), None)
    hi = next((m.le for m in info.metadata if isinstance(m, Le)), None)
    if lo is not None and hi is not None:
        return f"between {_number(lo)} and {_number(hi)}"
    if lo is not None:
        return f"at least {_number(lo)}"
    return f"at most {_number(hi)}" if hi is not None else "valid"


def _read_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    if not Path(path).is_file():
        raise ConfigError(
            ConfigCheck(errors=(ConfigProblem("config", str(path), "file not found"),))
        )
    try:
        return TomlConfigSettingsSource(Settings, toml_file=Path(path))()
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            ConfigCheck(errors=(ConfigProblem("config", str(path), f"not valid TOML: {exc}"),))
        ) from None


def _layers(
    document: Mapping[str, Any],
    env_source: NetmapEnvSource,
    platform: PlatformEnvSource,
    overrides: Mapping[str, Mapping[str, Any]],
) -> Iterator[tuple[Mapping[str, Any], Any]]:
    """(nested values, origin) from the highest precedence down; origin is a string or,
    for the text sources, a mapping dotted key -> origin."""
    yield overrides, "override"
    yield env_source(), env_source.origins()
    yield document, "file"
    yield platform(), platform.origins()


def _merge(
    layers: list[tuple[Mapping[str, Any], Any]],
) -> tuple[dict[str, Any], dict[str, str]]:
    merged: dict[str, Any] = {}
    value_sources = {
        f"{s}.{k}": "default" for s, model in SECTIONS.items() for k in model.model_fields
    }
    for values, origin in reversed(layers):  # lowest first; higher ones overwrite
        for section, section_values in values.items():
            if not isinstance(section_values, Mapping) or not isinstance(
                merged.get(section, {}), dict
            ):
                merged[section] = section_values  # not a table: the model says so
                continue
            target = merged.setdefault(section, {})
            for key, value in section_values.items():
                target[key] = value
                dotted = f"{section}.{key}"
                if dotted in value_sources:
                    value_sources[dotted] = origin if isinstance(origin, str) else origin[dotted]
    return merged, value_sources


def _problems(
    exc: ValidationError, merged: Mapping[str, Any], value_sources: Mapping[str, str]
) -> list[ConfigProblem]:
    problems: dict[str, ConfigProblem] = {}
    for error in exc.errors():
        section, *rest = error["loc"]
        section = str(section)
        if not rest:
            message = (
                "must be a table" if error["type"] in {"model_type", "dict_type"} else error["msg"]
            )
            problems.setdefault(section, ConfigProblem(section, error["input"], message))
            continue
        key = str(rest[0])
        dotted = f"{section}.{key}"
        if error["type"] == "extra_forbidden":
            known = ", ".join(sorted(SECTIONS[section].model_fields))
            problems.setdefault(
                dotted, ConfigProblem(dotted, error["input"], f"unknown key; known: {known}")
            )
            continue
        if error["type"] in {"greater_than_equal", "less_than_equal", "literal_error"}:
            message = f"must be {allowed_text(section, key)}"
        else:
            message = _TYPE_MESSAGES.get(error["type"], error["msg"])
        source = value_sources.get(dotted, "")
        # A platform variable is not a netmap name: say which one carried the bad value.
        if source.startswith("platform:"):
            message += f" (from {source.partition(':')[2]})"
        problems.setdefault(dotted, ConfigProblem(dotted, merged[section][key], message))
    return list(problems.values())


# Keys naming a directory. Relative ones are relative to the file when the file set them
# (``Settings.resolve_path``), and to the working directory otherwise: an operator's
# ``--data-dir var`` or ``NETMAP_DATA_DIR=var`` means ./var wherever the file lies.
PATH_KEYS = (
    "server.data_dir",
    "traffic.log_dir",
    "traffic.state_dir",
    "object_store.root",
    "reports.outbox_dir",
    "report_renderer.releases_directory",
)


def _anchor_paths(merged: dict[str, Any], value_sources: Mapping[str, str]) -> None:
    """Make relative paths that did not come from the file absolute, from the cwd."""
    for dotted in PATH_KEYS:
        section, key = dotted.split(".")
        if value_sources.get(dotted) == "file":
            continue
        values = merged.setdefault(section, {})
        if not isinstance(values, dict):
            continue  # not a table: validation says so
        value = values.get(key, SECTIONS[section].model_fields[key].default)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            values[key] = str(Path.cwd() / Path(value).expanduser())


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[Settings, ConfigCheck]:
    """Read the file (``path`` or ``$NETMAP_CONFIG``), apply env and overrides, validate.

    Returns ``(settings, check)``; raises ``ConfigError`` when any error is found,
    naming every bad key, its value and the allowed range.
    """
    env = os.environ if env is None else env
    path = path or env.get(CONFIG_ENV) or None
    overrides = overrides or {}
    sources: list[str] = []
    errors: list[ConfigProblem] = []
    document: dict[str, Any] = {}
    if path:
        document = _read_file(path)
        sources.append(str(Path(path).resolve()))
    for name in [n for n in document if n not in SECTIONS]:
        known = ", ".join(sorted(SECTIONS))
        errors.append(ConfigProblem(name, "[section]", f"unknown section; known: {known}"))
        del document[name]

    env_source = NetmapEnvSource(Settings, env)
    platform = PlatformEnvSource(Settings, env)
    file_server = document.get("server")
    platform.yield_port_to(
        "port" in overrides.get("server", {})
        or "server.port" in env_source.found
        or (isinstance(file_server, dict) and "port" in file_server)
    )
    if env_source.found:
        sources.append("environment")
    merged, value_sources = _merge(list(_layers(document, env_source, platform, overrides)))
    _anchor_paths(merged, value_sources)
    if platform.found:
        sources.append("platform")

    settings: Settings | None = None
    try:
        settings = Settings(**merged, config_path=str(Path(path).resolve()) if path else None)
    except ValidationError as exc:
        errors.extend(_problems(exc, merged, value_sources))
    warnings: list[ConfigProblem] = []
    if settings is not None and not errors:
        errors, warnings = cross_checks(settings)
    check = ConfigCheck(
        errors=tuple(errors),
        warnings=tuple(warnings),
        sources=tuple(sources),
        value_sources=value_sources,
    )
    if errors or settings is None:
        raise ConfigError(check)
    return settings, check


def check_settings(settings: Settings) -> ConfigCheck:
    """The cross-field checks of already-built settings (used by `GET /api/config/check`)."""
    errors, warnings = cross_checks(settings)
    return ConfigCheck(errors=tuple(errors), warnings=tuple(warnings))


def _fields(settings: Settings) -> Iterator[tuple[str, str, Any, bool]]:
    """(section, key, value, secret) for every setting."""
    for section_name in SECTIONS:
        section: Section = getattr(settings, section_name)
        for key in type(section).model_fields:
            yield section_name, key, getattr(section, key), is_secret(type(section), key)


def redacted_snapshot(settings: Settings) -> dict[str, dict[str, Any]]:
    """Effective values without secrets (secrets show only whether they are set)."""
    snapshot: dict[str, dict[str, Any]] = {name: {} for name in SECTIONS}
    for section, key, value, secret in _fields(settings):
        if secret:
            snapshot[section][key] = "<set>" if value else "<unset>"
        else:
            snapshot[section][key] = list(value) if isinstance(value, tuple) else value
    return snapshot


def secret_values(settings: Settings) -> list[str]:
    """The values of every setting declared secret that is set."""
    return [value for _, _, value, secret in _fields(settings) if secret and value]
