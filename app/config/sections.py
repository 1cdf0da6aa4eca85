"""The settings model: one pydantic model per TOML section, and the whole.

Every field declares its default and allowed range (``spec``), so the loader
(``app.config.loading``) can name the key, the offending value and what would
have been accepted, and the redacted snapshot (`GET /api/config/check`) comes
from the same declarations without ever printing a secret. Models are frozen:
settings are built once at start-up and never change afterwards (runtime
selections such as the renderer release live in database tables).

Values are strict (a TOML string is not an integer; ``true`` is not ``1``); the
environment source turns its strings into typed values first, so one rule
applies to every source. List settings are tuples, so settings stay hashable.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict


def spec(
    default: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    secret: bool = False,
    doc: str = "",
) -> Any:
    """Declare a setting with its default and allowed range (choices are ``Literal`` types)."""
    if isinstance(default, list | dict):
        raise TypeError("use tuples for list settings so settings stay immutable")
    return Field(
        default,
        ge=min,
        le=max,
        # A TOML array arrives as a list; its items stay strict.
        strict=False if isinstance(default, tuple) else None,
        json_schema_extra={"secret": secret, "doc": doc},
    )


def is_secret(section: type[BaseModel], key: str) -> bool:
    """Whether ``key`` of ``section`` is declared secret (its value is never shown)."""
    info = section.model_fields.get(key)
    extra = info.json_schema_extra if info is not None else None
    return bool(isinstance(extra, dict) and extra.get("secret"))


class Section(BaseModel):
    """One ``[section]`` of the file: strict, frozen, and unknown keys are errors."""

    model_config = ConfigDict(strict=True, frozen=True, extra="forbid")

    def replace(self, **changes: Any) -> Any:
        """A copy with some keys changed (tests and command options use this)."""
        return self.model_copy(update=changes)


class ServerSettings(Section):
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


class DatabaseSettings(Section):
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


class ElasticsearchSettings(Section):
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


class RunnerSettings(Section):
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


class ScanSettings(Section):
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


class IngestSettings(Section):
    max_observations_per_batch: int = spec(5000, min=1, max=100_000)
    max_dns_records_per_batch: int = spec(5000, min=1, max=100_000)
    max_body_bytes: int = spec(8 * 1024 * 1024, min=1024, max=64 * 1024 * 1024)
    observed_at_max_age_days: int = spec(30, min=1, max=3650)
    observed_at_max_future_seconds: int = spec(300, min=0, max=86400)
    max_tags: int = spec(16, min=0, max=256)
    max_tag_length: int = spec(64, min=1, max=256)
    max_banner_bytes: int = spec(8192, min=64, max=1_048_576)


class ReportRendererSettings(Section):
    releases_directory: str = spec("", doc="relative paths are relative to the config file")
    refresh_seconds: float = spec(5.0, min=0.2, max=300)
    ipc_timeout_seconds: float = spec(10.0, min=0.1, max=600)
    wait_timeout_seconds: float = spec(5.0, min=0.1, max=600)
    max_in_flight: int = spec(8, min=1, max=256)
    max_frame_bytes: int = spec(1_048_576, min=4096, max=64 * 1024 * 1024)
    drain_timeout_seconds: float = spec(30.0, min=0.1, max=3600)


class SmtpSettings(Section):
    host: str = spec("")
    port: int = spec(587, min=1, max=65535)
    username: str = spec("")
    password: str = spec("", secret=True)
    starttls: bool = spec(True)
    ssl: bool = spec(False)
    # How the connection is secured; "auto" follows the older starttls/ssl switches
    # (STARTTLS unless ssl = true). "none" is for a plain relay such as one on localhost.
    security: Literal["auto", "starttls", "tls", "none"] = spec(
        "auto",
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


class TrafficSettings(Section):
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


class AnalysisSettings(Section):
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
    slice_endpoints: int = spec(
        250_000,
        min=1,
        max=10_000_000,
        doc="endpoints per analysis statement; larger executions are analysed in slices",
    )
    warm_after_endpoints: int = spec(
        100_000,
        min=0,
        max=100_000_000,
        doc=(
            "after an analysis that staged or changed this many endpoints, read the search "
            "store's value keys back into memory (pg_prewarm); 0: never"
        ),
    )


class AlertSettings(Section):
    """Change alerts (docs/alerts.md): delivery retries, caps and outbound safety."""

    retry_hours: float = spec(
        24.0, min=0.01, max=720, doc="a delivery is retried this long, then marked dead"
    )
    max_messages_per_run: int = spec(
        50, min=1, max=100000, doc="`each` messages per run, rule and channel; the rest digested"
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
    public_url: str = spec(
        "",
        doc="where people reach netmap (the site or its /console), for links in messages; "
        "empty: paths from the site's root (netmap up: its own address)",
    )
    conditions_interval_seconds: float = spec(
        30.0,
        min=0.5,
        max=3600,
        doc="how often scanner_offline rules are evaluated",
    )
    certificate_interval_seconds: float = spec(
        600.0, min=0.5, max=86400, doc="how often certificate_expires rules are evaluated"
    )


class SecuritySettings(Section):
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


class ObjectStoreSettings(Section):
    backend: Literal["filesystem", "s3"] = spec("filesystem")
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


class SearchSettings(Section):
    facts_retention_months: int = spec(
        0,
        min=0,
        max=1200,
        doc="months of raw facts kept (whole months dropped by partition); 0: kept forever",
    )
    retention_interval_seconds: float = spec(
        3600.0, min=60, max=7 * 86400, doc="how often the runner looks for months to drop"
    )
    interactive_timeout_seconds: float = spec(
        15.0,
        min=0.1,
        max=3600,
        doc="an asset search or its facets that a person waits for (API, console) is "
        "stopped after this long and answered 503 search_timeout; exports, reports and "
        "alerts are not limited by it",
    )


class ExportSettings(Section):
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


class ReportSettings(Section):
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


class OpsSettings(Section):
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


class AgentSettings(Section):
    """The scanner agent (``netmap agent``) and the result-file importers."""

    batch_size: int = spec(1000, min=1, max=100_000, doc="observations per upload batch")
    upload_concurrency: int = spec(
        2, min=1, max=16, doc="non-final batches in flight at once (the final waits for all)"
    )
    service_detection: bool = spec(False, doc="run nmap with -sV (slower, names products)")
    version_intensity: int = spec(7, min=0, max=9, doc="nmap --version-intensity with -sV")
    nmap_path: str = spec("nmap")
    masscan_path: str = spec("masscan")
    nmap_timing: Literal["T0", "T1", "T2", "T3", "T4", "T5"] = spec("T4")
    nmap_extra_args: tuple[str, ...] = spec((), doc="appended to every nmap command line")
    nmap_scripts: tuple[str, ...] = spec(
        ("banner",), doc="NSE scripts run with service detection (their output goes to details)"
    )
    max_profile: Literal["quick", "standard", "deep"] = spec(
        "deep",
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


SECTIONS: dict[str, type[Section]] = {
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


class Settings(BaseSettings):
    """The whole configuration. Loaded by ``app.config.loading.load_settings``, which
    merges the file, ``NETMAP_*`` variables, platform variables and overrides with the
    pydantic-settings sources and records where each value came from."""

    model_config = SettingsConfigDict(frozen=True, extra="forbid", validate_default=False)

    server: ServerSettings = Field(default_factory=ServerSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    elasticsearch: ElasticsearchSettings = Field(default_factory=ElasticsearchSettings)
    runner: RunnerSettings = Field(default_factory=RunnerSettings)
    scan: ScanSettings = Field(default_factory=ScanSettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    report_renderer: ReportRendererSettings = Field(default_factory=ReportRendererSettings)
    smtp: SmtpSettings = Field(default_factory=SmtpSettings)
    traffic: TrafficSettings = Field(default_factory=TrafficSettings)
    security: SecuritySettings = Field(default_factory=SecuritySettings)
    object_store: ObjectStoreSettings = Field(default_factory=ObjectStoreSettings)
    exports: ExportSettings = Field(default_factory=ExportSettings)
    reports: ReportSettings = Field(default_factory=ReportSettings)
    ops: OpsSettings = Field(default_factory=OpsSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    analysis: AnalysisSettings = Field(default_factory=AnalysisSettings)
    alerts: AlertSettings = Field(default_factory=AlertSettings)
    search: SearchSettings = Field(default_factory=SearchSettings)
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

    def replace(self, **sections: Mapping[str, Any] | Section) -> Settings:
        """A copy with some sections changed: a mapping changes some of a section's keys,
        a section model replaces it (tests and `netmap up` use this)."""
        updated: dict[str, Any] = {}
        for name, changes in sections.items():
            if isinstance(changes, Section):
                updated[name] = changes
            else:
                updated[name] = getattr(self, name).model_copy(update=dict(changes))
        return self.model_copy(update=updated)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The loader runs the file, environment and platform sources itself, in its
        # order of precedence, so it can say where each value came from; what reaches
        # the model is their merge. ``Settings()`` alone is the built-in defaults.
        return (init_settings,)
