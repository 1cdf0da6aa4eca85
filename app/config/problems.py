"""What start-up found wrong (or worth a word) in the configuration."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.config.sections import SECTIONS, is_secret


def is_secret_key(dotted: str) -> bool:
    """Whether ``section.key`` is declared secret (its value is never shown)."""
    section, _, key = dotted.partition(".")
    return section in SECTIONS and is_secret(SECTIONS[section], key)


@dataclass(frozen=True)
class ConfigProblem:
    key: str
    value: Any
    message: str

    def render(self) -> str:
        shown = "<redacted>" if is_secret_key(self.key) else repr(self.value)
        return f"{self.key} = {shown}: {self.message}"


@dataclass(frozen=True)
class ConfigCheck:
    """What start-up found: errors stop the process, warnings are printed and kept."""

    errors: tuple[ConfigProblem, ...] = ()
    warnings: tuple[ConfigProblem, ...] = ()
    sources: tuple[str, ...] = ()
    # dotted key -> where its effective value came from: "default", "file",
    # "environment:NETMAP_…", "platform:PORT" or "override". Never the value itself.
    value_sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors

    def configured_sources(self) -> dict[str, str]:
        """The keys whose value did not come from the built-in default, with their source."""
        return {key: src for key, src in sorted(self.value_sources.items()) if src != "default"}

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": [p.render() for p in self.errors],
            "warnings": [p.render() for p in self.warnings],
            "sources": list(self.sources),
            "value_sources": self.configured_sources(),
        }


class ConfigError(Exception):
    """Raised at start-up when the configuration cannot be used."""

    def __init__(self, check: ConfigCheck):
        self.check = check
        lines = "\n".join(f"  - {p.render()}" for p in check.errors)
        super().__init__(f"invalid configuration:\n{lines}")
