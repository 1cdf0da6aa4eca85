"""The configuration check an operator reads at start-up and from the API (OPS-1).

``app.config.load_settings`` validates keys one by one and across fields; this
module adds the checks that look at the deployment around the settings: the
runner's heartbeat against its worker timeout, a lease heartbeat that leaves
little room, SMTP without TLS, little free space on the data directory's volume,
a secret key that was generated on first start. The report never carries a
secret: secret keys show only whether they are set, and any credentials inside
a URL-like value (``scheme://user:password@host``) are cut out wherever they
appear, because an operator can put a URL with a password into a key we did
not foresee.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import shutil
from pathlib import Path
from typing import Any

from app.config import (
    ConfigCheck,
    ConfigProblem,
    Settings,
    check_settings,
    redacted_snapshot,
    smtp_security,
)

REDACTED = "<redacted>"
# scheme://user:password@host or scheme://token@host: everything before the @ goes.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")


def scrub(value: Any) -> Any:
    """The value with credentials in URL-like strings removed (recursively)."""
    if isinstance(value, str):
        return _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", value)
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    if isinstance(value, dict):
        return {key: scrub(item) for key, item in value.items()}
    return value


def _is_loopback(host: str) -> bool:
    if host in {"localhost", ""}:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _existing_parent(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def data_volume_usage(settings: Settings) -> Any | None:
    """Disk usage of the volume holding the data directory (or its nearest existing parent)."""
    try:
        return shutil.disk_usage(_existing_parent(settings.data_dir))
    except OSError:
        return None


def generated_secret_key_path(settings: Settings) -> Path:
    return settings.data_dir / "secret_key"


def _secret_key_problems(settings: Settings) -> list[ConfigProblem]:
    path = generated_secret_key_path(settings)
    configured = settings.security.secret_key
    try:
        generated = path.read_text().strip() if path.is_file() else ""
    except OSError:
        generated = ""
    if not configured and not generated:
        return [
            ConfigProblem(
                "security.secret_key",
                "",
                f"not set: `netmap up` generates one on first start and keeps it in {path}; "
                "set NETMAP_SECRET_KEY for web processes started another way",
            )
        ]
    if generated and (not configured or configured == generated):
        return [
            ConfigProblem(
                "security.secret_key",
                configured or generated,
                f"generated on first start and kept only in {path}: back it up "
                "(`netmap backup` includes it) and set the same NETMAP_SECRET_KEY on every host",
            )
        ]
    return []


def bulk_senders(settings: Settings) -> int:
    """Processes that may send Elasticsearch bulk requests at once in the deployment.

    Declared as ``[elasticsearch] bulk_processes``; otherwise this host's own: every
    web worker and every runner process keeps its own ``bulk_max_concurrency``.
    """
    declared = settings.elasticsearch.bulk_processes
    return declared or settings.server.web_workers + settings.runner.processes


def _bulk_budget_problems(settings: Settings) -> list[ConfigProblem]:
    """The deployment's bulk concurrency against the cluster's budget (STO-4): errors.

    ``bulk_max_concurrency`` is enforced per process (a semaphore in each store);
    processes never hold a database connection while talking to the search store,
    so there is no shared lock across them, and the deployment-wide bound is
    senders x cap. So the total is a required setting whenever
    Elasticsearch is configured, and a start-up (web or runner) refuses a budget
    senders x cap cannot honour.
    """
    es = settings.elasticsearch
    if not es.url:
        return []
    if not es.bulk_max_concurrency_total:
        senders = bulk_senders(settings)
        return [
            ConfigProblem(
                "elasticsearch.bulk_max_concurrency_total",
                0,
                "required with elasticsearch.url: the bulk requests the cluster takes at once "
                f"from the whole deployment (this host alone sends up to {senders} processes x "
                f"{es.bulk_max_concurrency} = {senders * es.bulk_max_concurrency})",
            )
        ]
    senders = bulk_senders(settings)
    at_once = senders * es.bulk_max_concurrency
    if at_once <= es.bulk_max_concurrency_total:
        return []
    counted = (
        "elasticsearch.bulk_processes"
        if es.bulk_processes
        else "server.web_workers + runner.processes of this host"
    )
    fits = es.bulk_max_concurrency_total // senders
    advice = (
        f"set it to at most {fits}"
        if fits >= 1
        else "even 1 per process is too many: run fewer processes or raise the total"
    )
    return [
        ConfigProblem(
            "elasticsearch.bulk_max_concurrency",
            es.bulk_max_concurrency,
            f"{senders} processes ({counted}) x {es.bulk_max_concurrency} = {at_once} bulk "
            f"requests at once, above elasticsearch.bulk_max_concurrency_total "
            f"({es.bulk_max_concurrency_total}): {advice}",
        )
    ]


def operational_problems(settings: Settings) -> tuple[list[ConfigProblem], list[ConfigProblem]]:
    """Errors and warnings about the deployment the settings will run in."""
    errors: list[ConfigProblem] = []
    warnings: list[ConfigProblem] = []
    runner = settings.runner
    if runner.heartbeat_seconds * 2 > runner.worker_timeout:
        errors.append(
            ConfigProblem(
                "runner.heartbeat_seconds",
                runner.heartbeat_seconds,
                f"must be at most runner.worker_timeout / 2 (= {runner.worker_timeout / 2:g}) "
                "or healthy workers are killed as hung",
            )
        )
    elif runner.heartbeat_seconds * 4 > runner.worker_timeout:
        warnings.append(
            ConfigProblem(
                "runner.heartbeat_seconds",
                runner.heartbeat_seconds,
                f"close to runner.worker_timeout ({runner.worker_timeout:g}); "
                f"at most {runner.worker_timeout / 4:g} leaves room for a slow beat",
            )
        )
    es = settings.elasticsearch
    if es.projection_heartbeat_seconds * 4 > es.projection_lease_seconds:
        # At lease/3 it is already an error; between lease/4 and lease/3 one late
        # renewal is enough to lose the lease to another runner.
        warnings.append(
            ConfigProblem(
                "elasticsearch.projection_heartbeat_seconds",
                es.projection_heartbeat_seconds,
                f"close to projection_lease_seconds ({es.projection_lease_seconds}); "
                f"recommended at most {es.projection_lease_seconds / 4:g}",
            )
        )
    errors.extend(_bulk_budget_problems(settings))
    renderer = settings.report_renderer
    if renderer.drain_timeout_seconds <= renderer.ipc_timeout_seconds:
        # MOD-2: work in flight ends by its IPC timeout at the latest (the worker is
        # killed); a generation is "stuck" only when it still holds work after that.
        errors.append(
            ConfigProblem(
                "report_renderer.drain_timeout_seconds",
                renderer.drain_timeout_seconds,
                "must be above report_renderer.ipc_timeout_seconds "
                f"({renderer.ipc_timeout_seconds:g}): a call within its IPC timeout is not stuck",
            )
        )
    smtp = settings.smtp
    if smtp.host and smtp_security(smtp) == "none" and not _is_loopback(smtp.host):
        warnings.append(
            ConfigProblem(
                "smtp.host",
                smtp.host,
                "mail (and smtp.password) would travel unencrypted: "
                'set smtp.security = "starttls" or "tls"',
            )
        )
    if smtp.password and not smtp.host:
        warnings.append(ConfigProblem("smtp.password", smtp.password, "set but smtp.host is empty"))
    if not es.verify_certs and es.url:
        warnings.append(
            ConfigProblem(
                "elasticsearch.verify_certs", False, "TLS certificates of Elasticsearch unchecked"
            )
        )
    if (
        settings.security.ratelimit_storage_uri.startswith("memory://")
        and settings.server.web_workers > 1
    ):
        warnings.append(
            ConfigProblem(
                "security.ratelimit_storage_uri",
                settings.security.ratelimit_storage_uri,
                f"memory:// counts per web worker: with {settings.server.web_workers} workers "
                "each limit is that many times higher (use redis:// to share it)",
            )
        )
    usage = data_volume_usage(settings)
    if usage is not None and usage.total:
        free_percent = usage.free * 100.0 / usage.total
        if free_percent < settings.ops.min_free_disk_percent:
            warnings.append(
                ConfigProblem(
                    "server.data_dir",
                    str(settings.data_dir),
                    f"its volume has {free_percent:.1f}% free ({usage.free // 2**20} MiB), "
                    f"below ops.min_free_disk_percent ({settings.ops.min_free_disk_percent:g}%)",
                )
            )
    warnings.extend(_secret_key_problems(settings))
    return errors, warnings


def full_check(settings: Settings, loaded: ConfigCheck | None = None) -> ConfigCheck:
    """The load-time check (or the cross-field checks re-run) plus the deployment checks."""
    base = loaded if loaded is not None else check_settings(settings)
    errors, warnings = operational_problems(settings)
    return dataclasses.replace(
        base,
        errors=base.errors + tuple(p for p in errors if p not in base.errors),
        warnings=base.warnings + tuple(p for p in warnings if p not in base.warnings),
    )


def _problem(problem: ConfigProblem) -> dict[str, Any]:
    rendered = problem.render()  # "key = value: message", the value already redacted
    shown = rendered[len(problem.key) + 3 : len(rendered) - len(problem.message) - 2]
    return {
        "key": problem.key,
        "value": scrub(shown),
        "message": scrub(problem.message),
        "text": scrub(rendered),
    }


def check_report(settings: Settings, check: ConfigCheck) -> dict[str, Any]:
    """The JSON form: problems (key, value, reason) and the effective values, redacted."""
    return {
        "ok": check.ok,
        "errors": [_problem(p) for p in check.errors],
        "warnings": [_problem(p) for p in check.warnings],
        "sources": list(check.sources),
        "effective": scrub(redacted_snapshot(settings)),
    }


def failed_report(check: ConfigCheck) -> dict[str, Any]:
    """The JSON form of settings that did not load: the same keys as ``check_report``,
    problems in the same shape, and no effective values (there are none)."""
    return {
        "ok": False,
        "errors": [_problem(p) for p in check.errors],
        "warnings": [_problem(p) for p in check.warnings],
        "sources": list(check.sources),
        "effective": None,
    }


def render_text(check: ConfigCheck) -> str:
    """One line per problem, for start-up output and `netmap config check`."""
    lines = [f"config error: {scrub(p.render())}" for p in check.errors]
    lines += [f"config warning: {scrub(p.render())}" for p in check.warnings]
    if not lines:
        lines.append("config check: no problems found")
    return "\n".join(lines)


# Set by `netmap up` for its web server and runner: it has printed the check's warnings once
# already, so each child (and each gunicorn worker) logs them at debug level only.
STARTUP_CHECKED_ENV = "NETMAP_STARTUP_CHECKED"


def startup_event_level(level: int) -> int:
    """``level``, or debug when `netmap up` already showed the start-up check."""
    import logging

    return logging.DEBUG if os.environ.get(STARTUP_CHECKED_ENV) == "1" else level


def emit_check(check: ConfigCheck, process: str) -> None:
    """Start-up output of web and runner processes: one event per problem, redacted."""
    import logging

    from app.observability import emit

    for problem in check.errors:
        emit("ConfigError", level=logging.ERROR, process=process, problem=scrub(problem.render()))
    for problem in check.warnings:
        emit(
            "ConfigWarning",
            level=startup_event_level(logging.WARNING),
            process=process,
            problem=scrub(problem.render()),
        )
    emit(
        "ConfigChecked",
        level=startup_event_level(logging.INFO),
        process=process,
        errors=len(check.errors),
        warnings=len(check.warnings),
        pid=os.getpid(),
    )
