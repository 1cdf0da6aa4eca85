"""Start-up settings: one TOML file plus environment overrides, validated once.

Settings are frozen dataclasses built when a process starts; nothing changes them
afterwards (runtime selections such as the renderer release live in database
tables with revisions). Every field declares its allowed range here, so the
loader can name the key, the offending value and what would have been accepted,
and the redacted snapshot (`GET /api/config/check`) can be produced from the same
declarations without ever printing a secret.

Environment overrides: every key can be set as ``NETMAP_<SECTION>_<KEY>``
(``NETMAP_ELASTICSEARCH_URL``, ``NETMAP_DATABASE_URL``); a few documented
aliases exist for the secrets operators set most (``NETMAP_SECRET_KEY``,
``NETMAP_TRAFFIC_TOKEN``, ``NETMAP_DATA_DIR``).

Platform conventions: a platform that runs Procfiles hands the app ``PORT``,
``DATABASE_URL``, ``WEB_CONCURRENCY`` and ``REDIS_URL``. They fill the matching
keys only when netmap's own settings (file, ``NETMAP_*`` variables, overrides)
leave them unset, so an operator can always pin a value. ``ConfigCheck.value_sources``
records where every effective value came from (default, file, environment,
platform or override) without the values themselves.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_origin, get_type_hints

from app.special_use import SPECIAL_USE_CLASSES

CONFIG_ENV = "NETMAP_CONFIG"

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


def spec(
    default: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[Any, ...] | None = None,
    secret: bool = False,
    doc: str = "",
) -> Any:
    """Declare a setting with its default and allowed range."""
    if isinstance(default, list | dict):
        raise TypeError("use tuples for list settings so settings stay immutable")
    return field(
        default=default,
        metadata={"min": min, "max": max, "choices": choices, "secret": secret, "doc": doc},
    )


@dataclass(frozen=True)
class ServerSettings:
    host: str = spec("127.0.0.1", doc="address `netmap up` binds the web server to")
    port: int = spec(8000, min=0, max=65535)
    data_dir: str = spec("./var", doc="embedded PostgreSQL data, generated secrets, runtime files")
    web_workers: int = spec(2, min=1, max=64)
    web_threads: int = spec(4, min=1, max=64)
    request_timeout_seconds: int = spec(60, min=5, max=3600)
    upload_concurrency: int = spec(
        1,
        min=1,
        max=64,
        doc="scanner uploads one web worker runs at once; the others wait (reads stay fast)",
    )
    upload_wait_seconds: float = spec(
        2.0,
        min=0.0,
        max=600,
        doc="an upload waits at most this long for a slot, then runs without one",
    )
    header_timeout_seconds: float = spec(
        10.0,
        min=0.5,
        max=300,
        doc="a client must send its whole request head within this time (slow clients)",
    )
    body_timeout_seconds: float = spec(
        60.0,
        min=0.5,
        max=3600,
        doc="a buffered request body must arrive within this time after its head",
    )
    body_buffer_max_bytes: int = spec(
        16 * 1024 * 1024,
        min=0,
        max=1024**3,
        doc="bodies up to this size are read by the worker's event loop before a thread "
        "takes the request (0: off); larger ones (imports) are read by the thread",
    )


@dataclass(frozen=True)
class DatabaseSettings:
    url: str = spec("", secret=True, doc="empty: the embedded PostgreSQL under data_dir")
    pool_size: int = spec(10, min=1, max=200)
    max_overflow: int = spec(5, min=0, max=200)
    pool_timeout_seconds: float = spec(5.0, min=0.05, max=120)
    pool_recycle_seconds: int = spec(1800, min=30, max=86400)
    statement_timeout_ms: int = spec(60000, min=0, max=3_600_000)
    lock_timeout_ms: int = spec(10000, min=0, max=3_600_000)
    idle_in_transaction_timeout_ms: int = spec(60000, min=0, max=3_600_000)
    # Deploy: limits for `netmap db upgrade`; 0 disables one.
    migration_lock_timeout_ms: int = spec(
        5000, min=0, max=3_600_000, doc="a migration waiting longer for a table lock fails"
    )
    migration_statement_timeout_ms: int = spec(
        600_000, min=0, max=86_400_000, doc="longest single migration statement"
    )


@dataclass(frozen=True)
class ElasticsearchSettings:
    url: str = spec("", secret=True, doc="empty: the PostgreSQL search store")
    username: str = spec("")
    password: str = spec("", secret=True)
    api_key: str = spec("", secret=True)
    ca_certs: str = spec("")
    verify_certs: bool = spec(True)
    index_prefix: str = spec("netmap")
    request_timeout_seconds: float = spec(30.0, min=1, max=600)
    bulk_batch_size: int = spec(1000, min=1, max=10000)
    bulk_max_concurrency: int = spec(
        2,
        min=1,
        max=32,
        doc="bulk requests one process sends at once (every web worker and runner process "
        "has its own)",
    )
    bulk_max_concurrency_total: int = spec(
        0,
        min=0,
        max=4096,
        doc="bulk requests the cluster takes at once from the whole deployment; required "
        "with elasticsearch.url: start-up refuses processes x bulk_max_concurrency above it",
    )
    bulk_processes: int = spec(
        0,
        min=0,
        max=4096,
        doc="processes sending bulk requests in the whole deployment (web workers and runner "
        "processes of every host); 0: this host's server.web_workers + runner.processes",
    )
    bulk_retry_budget: int = spec(5, min=0, max=50, doc="retries per bulk request for 429/5xx")
    bulk_retry_backoff_ms: int = spec(200, min=10, max=60000)
    request_line_max_bytes: int = spec(3072, min=256, max=65536)
    projection_page_size: int = spec(1000, min=1, max=2000)
    projection_bulk_max_bytes: int = spec(5_242_880, min=65_536, max=16_777_216)
    projection_pages_per_tick: int = spec(4, min=1, max=32)
    projection_lease_seconds: int = spec(120, min=10, max=3600)
    projection_heartbeat_seconds: int = spec(20, min=1, max=1200)
    projection_max_backoff_seconds: int = spec(300, min=1, max=86400)
    bulk_max_bytes: int = spec(
        5_242_880,
        min=65_536,
        max=67_108_864,
        doc="NDJSON bytes per bulk request for facts and execution endpoints",
    )
    index_shards: int = spec(1, min=1, max=64, doc="primary shards of indices we create")
    index_replicas: int = spec(1, min=0, max=5, doc="replicas of indices we create")
    projection_retry_base_seconds: float = spec(
        5.0,
        min=0.05,
        max=3600,
        doc="first retry delay of a failed projection slice; doubles per failure (with jitter) "
        "up to projection_max_backoff_seconds",
    )


@dataclass(frozen=True)
class RunnerSettings:
    processes: int = spec(2, min=1, max=64)
    shutdown_timeout_seconds: float = spec(30.0, min=0.5, max=3600)
    idle_backoff_max_seconds: float = spec(2.0, min=0.05, max=60)
    execution_recovery_interval_seconds: float = spec(15.0, min=0.5, max=3600)
    schedule_tick_seconds: float = spec(
        1.0, min=0.05, max=300, doc="how often the scheduler looks for due task schedules"
    )
    schedule_lease_seconds: float = spec(
        30.0, min=1, max=3600, doc="lease of the scheduler's tick; a dead ticker's expires"
    )
    worker_restart_backoff_seconds: float = spec(1.0, min=0.1, max=300)
    worker_timeout: float = spec(
        120.0,
        min=1,
        max=86400,
        doc="seconds a worker may stay silent (no heartbeat) before it is killed and replaced",
    )
    heartbeat_seconds: float = spec(
        2.0, min=0.05, max=3600, doc="how often a worker tells the supervisor it is alive"
    )
    boot_failure_limit: int = spec(
        5,
        min=1,
        max=1000,
        doc="workers dying while booting this many times in a row stop the runner",
    )


@dataclass(frozen=True)
class ScanSettings:
    execution_lease_seconds: int = spec(300, min=10, max=86400)
    max_attempts: int = spec(3, min=1, max=50)
    retry_backoff_seconds: int = spec(30, min=0, max=86400)
    max_targets_per_task: int = spec(1024, min=1, max=100_000)
    max_addresses_per_task: int = spec(1_048_576, min=1, max=16_777_216)
    max_ports_per_task: int = spec(65535, min=1, max=65535)
    execution_max_addresses: int = spec(256, min=1, max=65536)
    # Runs of a task kept with their executions and results; older finished runs are
    # removed by the task purge job (docs/architecture.md, "Runs").
    keep_runs: int = spec(30, min=1, max=100_000)
    max_domain_length: int = spec(253, min=1, max=253)
    scanner_offline_seconds: int = spec(
        180,
        min=10,
        max=86400,
        doc="a scanner with no claim, lease renewal or upload for this long is offline",
    )
    min_schedule_seconds: int = spec(
        300, min=1, max=86400, doc="shortest gap a task schedule may have between fire times"
    )
    # Special-use address classes a task (or a DNS follow-up task, or the agent) may target;
    # the others (by default metadata, loopback, link_local, multicast, broadcast,
    # unspecified) are refused (SCN-7, docs/security.md).
    special_use_targets: tuple[str, ...] = spec(
        ("private",),
        doc="allowed classes among metadata, loopback, private, link_local, multicast, "
        "broadcast, unspecified",
    )


@dataclass(frozen=True)
class IngestSettings:
    max_observations_per_batch: int = spec(5000, min=1, max=100_000)
    max_dns_records_per_batch: int = spec(5000, min=1, max=100_000)
    max_body_bytes: int = spec(8 * 1024 * 1024, min=1024, max=64 * 1024 * 1024)
    observed_at_max_age_days: int = spec(30, min=1, max=3650)
    observed_at_max_future_seconds: int = spec(300, min=0, max=86400)
    max_tags: int = spec(16, min=0, max=256)
    max_tag_length: int = spec(64, min=1, max=256)
    max_banner_bytes: int = spec(8192, min=64, max=1_048_576)


@dataclass(frozen=True)
class ReportRendererSettings:
    releases_directory: str = spec("", doc="relative paths are relative to the config file")
    refresh_seconds: float = spec(5.0, min=0.2, max=300)
    ipc_timeout_seconds: float = spec(10.0, min=0.1, max=600)
    wait_timeout_seconds: float = spec(5.0, min=0.1, max=600)
    max_in_flight: int = spec(8, min=1, max=256)
    max_frame_bytes: int = spec(1_048_576, min=4096, max=64 * 1024 * 1024)
    drain_timeout_seconds: float = spec(30.0, min=0.1, max=3600)


@dataclass(frozen=True)
class SmtpSettings:
    host: str = spec("")
    port: int = spec(587, min=1, max=65535)
    username: str = spec("")
    password: str = spec("", secret=True)
    starttls: bool = spec(True)
    ssl: bool = spec(False)
    # How the connection is secured; "auto" follows the older starttls/ssl switches
    # (STARTTLS unless ssl = true). "none" is for a plain relay such as one on localhost.
    security: str = spec(
        "auto",
        choices=("auto", "starttls", "tls", "none"),
        doc='"starttls" (port 587), "tls" (implicit TLS, port 465), "none" (plain) or "auto"',
    )
    from_address: str = spec("netmap@localhost")
    timeout_seconds: float = spec(30.0, min=1, max=600)


def smtp_security(smtp: SmtpSettings) -> str:
    """The effective ``[smtp] security``: "starttls", "tls" or "none"."""
    if smtp.security != "auto":
        return smtp.security
    if smtp.ssl:
        return "tls"
    return "starttls" if smtp.starttls else "none"


@dataclass(frozen=True)
class TrafficSettings:
    log_dir: str = spec("/var/log/nginx")
    domains: tuple[str, ...] = spec(())
    timezone: str = spec("+08:00", doc="business time zone: UTC offset (+08:00) or IANA name")
    day_cache_hours: float = spec(
        1.0,
        min=0,
        max=168,
        doc="hours a past day is not read again once the log showed it complete (TRF-5)",
    )
    ingest_token: str = spec("", secret=True)
    source_server: str = spec("")
    max_line_bytes: int = spec(16384, min=256, max=1_048_576)
    enabled: bool = spec(False, doc="run the periodic rollup job in the runner")
    batch_size: int = spec(
        1000, min=1, max=50000, doc="rows per delivery batch (standalone: per POST)"
    )
    file_patterns: tuple[str, ...] = spec(
        ("{domain}.access.log*",),
        doc="glob patterns (relative to log_dir) naming one domain's current and rotated logs",
    )
    state_dir: str = spec("", doc="standalone checkpoints; empty: <data_dir>/traffic-state")
    max_path_bytes: int = spec(1024, min=16, max=2048, doc="longer paths are cut and end in ...")
    retention_days: int = spec(
        35, min=1, max=3650, doc="keep partial sums of rotated-away log files this long"
    )
    interval_seconds: float = spec(300.0, min=30, max=3600, doc="runner: 5-minute rollup period")
    day_interval_seconds: float = spec(
        3600.0, min=300, max=86400, doc="runner: day rollup (yesterday) period"
    )
    lease_seconds: float = spec(600.0, min=60, max=7200, doc="runner lease, renewed while reading")
    post_retries: int = spec(5, min=0, max=20, doc="standalone: retries per batch on 429/5xx")
    post_timeout_seconds: float = spec(30.0, min=1, max=600)
    max_rows_per_request: int = spec(10000, min=1, max=100000, doc="ingest endpoint limit")
    scan_processes: int = spec(
        0, min=0, max=64, doc="processes reading logs in a large scan; 0: one per CPU"
    )


@dataclass(frozen=True)
class AnalysisSettings:
    """Change analysis (ANA-1..8): the runner's leased analysis of finished executions."""

    retention_days: int = spec(
        30, min=1, max=3650, doc="processed analysis-queue rows are deleted after this many days"
    )
    lease_seconds: int = spec(300, min=10, max=3600)
    heartbeat_seconds: int = spec(30, min=1, max=1200)
    retry_base_seconds: float = spec(1.0, min=0.05, max=3600)
    max_backoff_seconds: int = spec(300, min=1, max=86400)
    stage_page_size: int = spec(
        5000, min=100, max=50000, doc="endpoints per page staged from a search store elsewhere"
    )
    prune_interval_seconds: float = spec(3600.0, min=10, max=86400)


@dataclass(frozen=True)
class AlertSettings:
    """Change alerts (docs/alerts.md): delivery retries, caps and outbound safety."""

    retry_hours: float = spec(
        24.0, min=0.01, max=720, doc="a delivery is retried this long, then marked dead"
    )
    max_messages_per_run: int = spec(
        50, min=1, max=100000, doc="`each` messages per change set, rule and channel; rest digested"
    )
    digest_changes: int = spec(20, min=1, max=1000, doc="changes listed in a digest message")
    allow_private_targets: bool = spec(
        False, doc="let webhook/Apprise targets be loopback, link-local or private addresses"
    )
    timeout_seconds: float = spec(10.0, min=0.5, max=120)
    max_response_bytes: int = spec(65536, min=1024, max=10485760)
    lease_seconds: int = spec(60, min=5, max=3600)
    retry_base_seconds: float = spec(5.0, min=0.01, max=3600)
    max_backoff_seconds: int = spec(3600, min=1, max=86400)
    secret_overlap_hours: float = spec(
        24.0, min=0, max=720, doc="a rotated webhook secret still signs for this long"
    )
    public_url: str = spec("", doc="base URL of the console used in links of messages")
    conditions_interval_seconds: float = spec(
        30.0,
        min=0.5,
        max=3600,
        doc="how often scanner_offline rules are evaluated",
    )
    certificate_interval_seconds: float = spec(
        600.0, min=0.5, max=86400, doc="how often certificate_expires rules are evaluated"
    )


@dataclass(frozen=True)
class SecuritySettings:
    secret_key: str = spec("", secret=True, doc="signs session cookies; generated under data_dir")
    encryption_key: str = spec("", secret=True, doc="Fernet key; derived from secret_key if empty")
    session_cookie_secure: bool = spec(
        True,
        doc="Secure session cookie, except for plain-HTTP requests to a loopback address; "
        "false: never Secure",
    )
    session_lifetime_hours: int = spec(12, min=1, max=24 * 90)
    ratelimit_storage_uri: str = spec(
        "memory://",
        secret=True,
        doc="shared store for rate limits (redis://…); memory://: per process, and login "
        "attempts are then counted in PostgreSQL",
    )
    login_rate_limit: str = spec("10 per minute", doc="login attempts per client address")
    login_username_rate_limit: str = spec(
        "10 per minute;100 per hour", doc="login attempts per username, from any address"
    )
    metrics_token: str = spec(
        "", secret=True, doc="bearer token for /metrics scrapers; empty: admin sessions only"
    )
    admin_rate_limit: str = spec("120 per minute")
    trusted_proxy_count: int = spec(0, min=0, max=10)


@dataclass(frozen=True)
class ObjectStoreSettings:
    backend: str = spec("filesystem", choices=("filesystem", "s3"))
    root: str = spec("", doc="filesystem store directory; empty: <data_dir>/objects")
    delete_concurrency: int = spec(
        3, min=1, max=64, doc="compensation/expiry deletes in flight at most"
    )
    delete_retry_interval_seconds: float = spec(
        60.0, min=1, max=86400, doc="runner: retry recorded failed deletes this often"
    )
    delete_retry_max_backoff_seconds: float = spec(3600.0, min=1, max=604800)
    endpoint_url: str = spec("", doc="empty: AWS; e.g. http://127.0.0.1:9000 for MinIO")
    region: str = spec("us-east-1")
    bucket: str = spec("")
    path_style: bool = spec(False, doc="path-style addressing (MinIO, Ceph, Garage)")
    access_key_id: str = spec("", secret=True, doc="empty: AWS environment/profile chain")
    secret_access_key: str = spec("", secret=True)
    session_token: str = spec("", secret=True)
    max_retries: int = spec(5, min=0, max=20, doc="retries per request on throttling/5xx")
    retry_base_ms: int = spec(100, min=1, max=60000, doc="first backoff; doubles, jittered")
    part_size_bytes: int = spec(
        8 * 1024 * 1024, min=5 * 1024 * 1024, max=512 * 1024 * 1024, doc="multipart part size"
    )
    connect_timeout_seconds: float = spec(10.0, min=0.1, max=600)
    read_timeout_seconds: float = spec(60.0, min=0.1, max=3600)


@dataclass(frozen=True)
class SearchSettings:
    facts_retention_months: int = spec(
        0,
        min=0,
        max=1200,
        doc="months of raw facts kept (whole months dropped by partition); 0: kept forever",
    )
    retention_interval_seconds: float = spec(
        3600.0, min=60, max=7 * 86400, doc="how often the runner looks for months to drop"
    )


@dataclass(frozen=True)
class ExportSettings:
    concurrency: int = spec(2, min=1, max=64, doc="export builds running at once per host")
    retention_hours: float = spec(72.0, min=0.01, max=24 * 365)
    page_size: int = spec(1000, min=10, max=10000, doc="endpoints read per keyset page")
    lease_seconds: int = spec(120, min=10, max=3600)
    heartbeat_seconds: int = spec(20, min=1, max=1200)
    max_attempts: int = spec(3, min=1, max=20)
    retry_backoff_seconds: float = spec(30.0, min=0, max=86400)
    download_url_seconds: int = spec(900, min=10, max=7 * 86400, doc="signed link lifetime")
    expiry_interval_seconds: float = spec(300.0, min=1, max=86400)
    max_queued_per_user: int = spec(
        4, min=1, max=1000, doc="exports one user may have queued or building (429 beyond)"
    )


@dataclass(frozen=True)
class ReportSettings:
    lease_seconds: int = spec(120, min=10, max=3600, doc="report generation lease")
    heartbeat_seconds: int = spec(20, min=1, max=1200)
    max_attempts: int = spec(5, min=1, max=20, doc="generation attempts before a report fails")
    incomplete_wait_seconds: float = spec(
        1800.0, min=0, max=7 * 86400, doc="how long a report waits for running scans"
    )
    schedule_check_seconds: float = spec(60.0, min=1, max=3600)
    delivery_max_attempts: int = spec(8, min=1, max=50)
    delivery_lease_seconds: int = spec(120, min=10, max=3600)
    outbox_dir: str = spec("", doc="where mail goes without SMTP; default <data_dir>/outbox")
    run_now_cooldown_seconds: float = spec(
        60.0, min=0, max=86400, doc="least time between two run-now of one definition (429)"
    )
    max_recipients: int = spec(50, min=1, max=1000, doc="recipients of one report definition")


@dataclass(frozen=True)
class OpsSettings:
    sample_seconds: float = spec(15.0, min=1, max=3600, doc="system resource sampling period")
    resource_retention_hours: float = spec(168.0, min=1, max=24 * 366)
    resource_max_rows: int = spec(
        500_000, min=1000, max=100_000_000, doc="resource samples kept at most (oldest go first)"
    )
    slow_sql_sample_seconds: float = spec(60.0, min=1, max=86400)
    slow_sql_top: int = spec(20, min=1, max=500, doc="statements kept per ranking and sample")
    slow_sql_retention_samples: int = spec(1440, min=2, max=1_000_000)
    min_free_disk_percent: float = spec(
        10.0, min=0, max=100, doc="warn when the data directory's volume has less free space"
    )


@dataclass(frozen=True)
class AgentSettings:
    """The scanner agent (``netmap agent``) and the result-file importers."""

    batch_size: int = spec(1000, min=1, max=100_000, doc="observations per upload batch")
    upload_concurrency: int = spec(
        2, min=1, max=16, doc="non-final batches in flight at once (the final waits for all)"
    )
    service_detection: bool = spec(False, doc="run nmap with -sV (slower, names products)")
    version_intensity: int = spec(7, min=0, max=9, doc="nmap --version-intensity with -sV")
    nmap_path: str = spec("nmap")
    masscan_path: str = spec("masscan")
    nmap_timing: str = spec("T4", choices=("T0", "T1", "T2", "T3", "T4", "T5"))
    nmap_extra_args: tuple[str, ...] = spec((), doc="appended to every nmap command line")
    nmap_scripts: tuple[str, ...] = spec(
        ("banner",), doc="NSE scripts run with service detection (their output goes to details)"
    )
    max_profile: str = spec(
        "deep",
        choices=("quick", "standard", "deep"),
        doc="the deepest scan profile this agent runs; a task asking for more runs at this one",
    )
    masscan_rate: int = spec(1000, min=1, max=10_000_000, doc="masscan --rate (packets/s)")
    report_states: tuple[str, ...] = spec(
        ("open",), doc="port states uploaded (open, closed, filtered, open|filtered)"
    )
    scan_timeout_seconds: float = spec(
        6 * 3600.0, min=10, max=7 * 86400, doc="a scan running longer is stopped and failed"
    )
    shutdown_grace_seconds: float = spec(
        60.0, min=0, max=3600, doc="SIGTERM: how long the running scan may still finish"
    )
    idle_backoff_max_seconds: float = spec(30.0, min=0.1, max=3600, doc="backoff on 204 / 5xx")
    request_timeout_seconds: float = spec(120.0, min=1, max=3600)
    spool_dir: str = spec("", doc="agent state; empty: $XDG_STATE_HOME/netmap-agent")
    dns_timeout_seconds: float = spec(5.0, min=0.1, max=120)
    dns_nameservers: tuple[str, ...] = spec(
        (), doc="name servers (ADDRESS or ADDRESS:PORT) for dns executions; empty: the system's"
    )
    import_max_bytes: int = spec(
        512 * 1024 * 1024, min=1024, max=64 * 1024**3, doc="largest importable result file"
    )
    allowed_networks: tuple[str, ...] = spec(
        (), doc="CIDRs the agent may scan; when set nothing outside them is ever scanned"
    )


_SECURITY_DEFAULTS = {
    "login_rate_limit": SecuritySettings.login_rate_limit,
    "login_username_rate_limit": SecuritySettings.login_username_rate_limit,
    "admin_rate_limit": SecuritySettings.admin_rate_limit,
}


SECTIONS: dict[str, type] = {
    "server": ServerSettings,
    "database": DatabaseSettings,
    "elasticsearch": ElasticsearchSettings,
    "runner": RunnerSettings,
    "scan": ScanSettings,
    "ingest": IngestSettings,
    "report_renderer": ReportRendererSettings,
    "smtp": SmtpSettings,
    "traffic": TrafficSettings,
    "security": SecuritySettings,
    "object_store": ObjectStoreSettings,
    "exports": ExportSettings,
    "reports": ReportSettings,
    "ops": OpsSettings,
    "agent": AgentSettings,
    "analysis": AnalysisSettings,
    "alerts": AlertSettings,
    "search": SearchSettings,
}


@dataclass(frozen=True)
class Settings:
    server: ServerSettings = field(default_factory=ServerSettings)
    database: DatabaseSettings = field(default_factory=DatabaseSettings)
    elasticsearch: ElasticsearchSettings = field(default_factory=ElasticsearchSettings)
    runner: RunnerSettings = field(default_factory=RunnerSettings)
    scan: ScanSettings = field(default_factory=ScanSettings)
    ingest: IngestSettings = field(default_factory=IngestSettings)
    report_renderer: ReportRendererSettings = field(default_factory=ReportRendererSettings)
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    traffic: TrafficSettings = field(default_factory=TrafficSettings)
    security: SecuritySettings = field(default_factory=SecuritySettings)
    object_store: ObjectStoreSettings = field(default_factory=ObjectStoreSettings)
    exports: ExportSettings = field(default_factory=ExportSettings)
    reports: ReportSettings = field(default_factory=ReportSettings)
    ops: OpsSettings = field(default_factory=OpsSettings)
    agent: AgentSettings = field(default_factory=AgentSettings)
    analysis: AnalysisSettings = field(default_factory=AnalysisSettings)
    alerts: AlertSettings = field(default_factory=AlertSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    config_path: str | None = None

    @property
    def config_dir(self) -> Path:
        return Path(self.config_path).resolve().parent if self.config_path else Path.cwd()

    @property
    def data_dir(self) -> Path:
        return self.resolve_path(self.server.data_dir)

    @property
    def web_pid_dir(self) -> Path:
        """Where each web server master of this instance writes its pid (gunicorn
        ``pidfile``, one file per bind address: several masters may serve one instance):
        how this instance's runner finds its web processes, and no other instance's on
        the same host."""
        return self.data_dir / "run" / "web"

    def resolve_path(self, value: str) -> Path:
        """Paths in the file are relative to the file; from env or defaults, to the cwd."""
        path = Path(value).expanduser()
        return path if path.is_absolute() else (self.config_dir / path).resolve()

    def replace(self, **sections: Mapping[str, Any]) -> Settings:
        """A copy with some keys changed (tests and `netmap up` use this)."""
        updated = {}
        for name, changes in sections.items():
            updated[name] = dataclasses.replace(getattr(self, name), **changes)
        return dataclasses.replace(self, **updated)


@dataclass(frozen=True)
class ConfigProblem:
    key: str
    value: Any
    message: str

    def render(self) -> str:
        shown = "<redacted>" if _is_secret_key(self.key) else repr(self.value)
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


def _is_secret_key(dotted: str) -> bool:
    section, _, key = dotted.partition(".")
    cls = SECTIONS.get(section)
    if cls is None:
        return False
    for f in dataclasses.fields(cls):
        if f.name == key:
            return bool(f.metadata.get("secret"))
    return False


def _env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    """Map environment variables onto dotted keys (aliases win over the generic form)."""
    return {dotted: env[name] for dotted, name in _env_override_names(env).items()}


def _env_override_names(env: Mapping[str, str]) -> dict[str, str]:
    """Which variable sets each dotted key; an alias wins over the generic form."""
    names: dict[str, str] = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            name = f"NETMAP_{section.upper()}_{f.name.upper()}"
            if name in env:
                names[f"{section}.{f.name}"] = name
    for alias, dotted in ENV_ALIASES.items():
        if alias in env:
            names[dotted] = alias
    return names


def normalise_platform_database_url(url: str) -> str:
    """Platforms still hand out ``postgres://``, a scheme SQLAlchemy 2 no longer accepts."""
    if url.startswith("postgres://"):
        return "postgresql://" + url[len("postgres://") :]
    return url


def _platform_values(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """dotted key -> (raw value, source) for the platform variables that are set (non-empty)."""
    found: dict[str, tuple[str, str]] = {}
    for variable, dotted in PLATFORM_ENV.items():
        raw = env.get(variable, "")
        if not raw.strip():
            continue
        if variable == "DATABASE_URL":
            raw = normalise_platform_database_url(raw.strip())
        found[dotted] = (raw, f"platform:{variable}")
    if "server.port" in found:
        found["server.host"] = (PLATFORM_BIND_HOST, "platform:PORT")
    return found


def _coerce(kind: Any, raw: Any, from_env: bool) -> Any:
    """Convert one value to the declared type; raises ValueError with a readable reason."""
    origin = get_origin(kind)
    if origin is tuple:
        (item_type, *_rest) = get_args(kind)
        if from_env and isinstance(raw, str):
            raw = [part.strip() for part in raw.split(",") if part.strip()]
        if not isinstance(raw, list | tuple):
            raise ValueError("must be a list")
        return tuple(_coerce(item_type, item, from_env) for item in raw)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        if from_env and isinstance(raw, str) and raw.lower() in {"1", "true", "yes", "on"}:
            return True
        if from_env and isinstance(raw, str) and raw.lower() in {"0", "false", "no", "off", ""}:
            return False
        raise ValueError("must be true or false")
    if kind is int:
        if isinstance(raw, bool):
            raise ValueError("must be an integer")
        if isinstance(raw, int):
            return raw
        if from_env and isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                pass
        raise ValueError("must be an integer")
    if kind is float:
        if isinstance(raw, bool):
            raise ValueError("must be a number")
        if isinstance(raw, int | float):
            return float(raw)
        if from_env and isinstance(raw, str):
            try:
                return float(raw.strip())
            except ValueError:
                pass
        raise ValueError("must be a number")
    if kind is str:
        if isinstance(raw, str):
            return raw
        raise ValueError("must be a string")
    raise ValueError(f"unsupported setting type {kind!r}")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _range_text(meta: Mapping[str, Any]) -> str:
    lo, hi, choices = meta.get("min"), meta.get("max"), meta.get("choices")
    if choices:
        return "one of " + ", ".join(repr(c) for c in choices)
    if lo is not None and hi is not None:
        return f"between {_number(lo)} and {_number(hi)}"
    if lo is not None:
        return f"at least {_number(lo)}"
    return f"at most {_number(hi)}"


def _validate_field(dotted: str, value: Any, meta: Mapping[str, Any]) -> str | None:
    lo, hi, choices = meta.get("min"), meta.get("max"), meta.get("choices")
    if choices and value not in choices:
        return f"must be {_range_text(meta)}"
    if isinstance(value, int | float) and not isinstance(value, bool):
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            return f"must be {_range_text(meta)}"
    return None


def _cross_checks(settings: Settings) -> tuple[list[ConfigProblem], list[ConfigProblem]]:
    errors: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    es = settings.elasticsearch
    if es.projection_heartbeat_seconds * 3 > es.projection_lease_seconds:
        errors.append(
            ConfigProblem(
                "elasticsearch.projection_heartbeat_seconds",
                es.projection_heartbeat_seconds,
                "must be at most projection_lease_seconds / 3 "
                f"(= {es.projection_lease_seconds / 3:g})",
            )
        )
    analysis = settings.analysis
    if analysis.heartbeat_seconds * 3 > analysis.lease_seconds:
        errors.append(
            ConfigProblem(
                "analysis.heartbeat_seconds",
                analysis.heartbeat_seconds,
                f"must be at most lease_seconds / 3 (= {analysis.lease_seconds / 3:g})",
            )
        )
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
    store, exports = settings.object_store, settings.exports
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
    if exports.heartbeat_seconds * 3 > exports.lease_seconds:
        problems.append(
            ConfigProblem(
                "exports.heartbeat_seconds",
                exports.heartbeat_seconds,
                f"must be at most exports.lease_seconds / 3 (= {exports.lease_seconds / 3:g})",
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
    sources: list[str] = []
    document: dict[str, Any] = {}
    errors: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []

    if path:
        try:
            with open(path, "rb") as handle:
                document = tomllib.load(handle)
            sources.append(str(Path(path).resolve()))
        except FileNotFoundError:
            raise ConfigError(
                ConfigCheck(errors=(ConfigProblem("config", str(path), "file not found"),))
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(
                ConfigCheck(errors=(ConfigProblem("config", str(path), f"not valid TOML: {exc}"),))
            ) from None

    env_values = _env_overrides(env)
    env_names = _env_override_names(env)
    if env_values:
        sources.append("environment")
    platform_values = _platform_values(env)
    server_document = document.get("server", {}) if isinstance(document.get("server"), dict) else {}
    if (
        "port" in (overrides or {}).get("server", {})
        or "server.port" in env_values
        or "port" in server_document
    ):
        # netmap's own port wins, and with it netmap's own (or the default) bind address.
        platform_values.pop("server.port", None)
        platform_values.pop("server.host", None)
    value_sources: dict[str, str] = {}

    sections: dict[str, Any] = {}
    for section_name in document:
        if section_name not in SECTIONS:
            errors.append(
                ConfigProblem(
                    section_name,
                    "[section]",
                    "unknown section; known: " + ", ".join(sorted(SECTIONS)),
                )
            )
    for section_name, cls in SECTIONS.items():
        raw_section = document.get(section_name, {})
        if not isinstance(raw_section, dict):
            errors.append(ConfigProblem(section_name, raw_section, "must be a table"))
            raw_section = {}
        hints = get_type_hints(cls)
        known = {f.name: f for f in dataclasses.fields(cls)}
        for key in raw_section:
            if key not in known:
                errors.append(
                    ConfigProblem(
                        f"{section_name}.{key}",
                        raw_section[key],
                        "unknown key; known: " + ", ".join(sorted(known)),
                    )
                )
        values: dict[str, Any] = {}
        section_overrides = (overrides or {}).get(section_name, {})
        for name, f in known.items():
            dotted = f"{section_name}.{name}"
            value_sources[dotted] = "default"
            if name in section_overrides:
                raw, from_env, source = section_overrides[name], False, "override"
            elif dotted in env_values:
                raw, from_env = env_values[dotted], True
                source = f"environment:{env_names[dotted]}"
            elif name in raw_section:
                raw, from_env, source = raw_section[name], False, "file"
            elif dotted in platform_values:
                (raw, source), from_env = platform_values[dotted], True
            else:
                continue
            # A platform variable is not a netmap name: say which one carried the bad value.
            suffix = f" (from {source.partition(':')[2]})" if source.startswith("platform:") else ""
            try:
                value = _coerce(hints[name], raw, from_env)
            except ValueError as exc:
                errors.append(ConfigProblem(dotted, raw, f"{exc}{suffix}"))
                continue
            problem = _validate_field(dotted, value, f.metadata)
            if problem:
                errors.append(ConfigProblem(dotted, value, f"{problem}{suffix}"))
                continue
            values[name] = value
            value_sources[dotted] = source
        unknown_overrides = set(section_overrides) - set(known)
        for name in sorted(unknown_overrides):
            errors.append(
                ConfigProblem(f"{section_name}.{name}", section_overrides[name], "unknown key")
            )
        sections[section_name] = cls(**values)

    settings = Settings(**sections, config_path=str(Path(path).resolve()) if path else None)
    if not errors:
        cross_errors, cross_warnings = _cross_checks(settings)
        errors.extend(cross_errors)
        warnings.extend(cross_warnings)
    if any(src.startswith("platform:") for src in value_sources.values()):
        sources.append("platform")
    check = ConfigCheck(
        errors=tuple(errors),
        warnings=tuple(warnings),
        sources=tuple(sources),
        value_sources=value_sources,
    )
    if errors:
        raise ConfigError(check)
    return settings, check


def check_settings(settings: Settings) -> ConfigCheck:
    """The cross-field checks of already-built settings (used by `GET /api/config/check`)."""
    errors, warnings = _cross_checks(settings)
    return ConfigCheck(errors=tuple(errors), warnings=tuple(warnings))


def redacted_snapshot(settings: Settings) -> dict[str, dict[str, Any]]:
    """Effective values without secrets (secrets show only whether they are set)."""
    snapshot: dict[str, dict[str, Any]] = {}
    for section_name in SECTIONS:
        section = getattr(settings, section_name)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(section):
            value = getattr(section, f.name)
            if f.metadata.get("secret"):
                values[f.name] = "<set>" if value else "<unset>"
            else:
                values[f.name] = list(value) if isinstance(value, tuple) else value
        snapshot[section_name] = values
    return snapshot
