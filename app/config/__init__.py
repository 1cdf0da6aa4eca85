"""Start-up settings: one TOML file plus environment overrides, validated once.

``sections`` declares the model (one pydantic model per TOML section, every key
with its default and range), ``sources`` the environment and platform sources,
``loading`` merges and validates them, ``checks`` the rules that span keys.
Everything a caller needs is importable from ``app.config``.
"""

from app.config.checks import DOMAIN_NAME
from app.config.loading import (
    CONFIG_ENV,
    check_settings,
    load_settings,
    redacted_snapshot,
    secret_values,
)
from app.config.problems import ConfigCheck, ConfigError, ConfigProblem
from app.config.sections import (
    SECTIONS,
    AgentSettings,
    AlertSettings,
    AnalysisSettings,
    DatabaseSettings,
    ElasticsearchSettings,
    ExportSettings,
    IngestSettings,
    ObjectStoreSettings,
    OpsSettings,
    ReportRendererSettings,
    ReportSettings,
    RunnerSettings,
    ScanSettings,
    SearchSettings,
    Section,
    SecuritySettings,
    ServerSettings,
    Settings,
    SmtpSettings,
    TrafficSettings,
    smtp_security,
    spec,
)
from app.config.sources import (
    ENV_ALIASES,
    PLATFORM_BIND_HOST,
    PLATFORM_ENV,
    normalise_platform_database_url,
)

__all__ = [
    "CONFIG_ENV",
    "DOMAIN_NAME",
    "ENV_ALIASES",
    "PLATFORM_BIND_HOST",
    "PLATFORM_ENV",
    "SECTIONS",
    "AgentSettings",
    "AlertSettings",
    "AnalysisSettings",
    "ConfigCheck",
    "ConfigError",
    "ConfigProblem",
    "DatabaseSettings",
    "ElasticsearchSettings",
    "ExportSettings",
    "IngestSettings",
    "ObjectStoreSettings",
    "OpsSettings",
    "ReportRendererSettings",
    "ReportSettings",
    "RunnerSettings",
    "ScanSettings",
    "SearchSettings",
    "Section",
    "SecuritySettings",
    "ServerSettings",
    "Settings",
    "SmtpSettings",
    "TrafficSettings",
    "check_settings",
    "load_settings",
    "normalise_platform_database_url",
    "redacted_snapshot",
    "secret_values",
    "smtp_security",
    "spec",
]
