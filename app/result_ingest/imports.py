"""Importing result files (nmap XML, masscan JSON, naabu JSON lines) as executions (AGT-7).

An import becomes an execution of kind ``import`` of the chosen task and goes
through the same upload pipeline as a scanner's batches — receipts, streams,
the final batch's single transaction, projection and analysis — so imported
results behave like scanned ones.

Two streaming passes over the file, so memory stays flat at any size and a
bad file writes nothing: the first pass parses every record and validates
every batch exactly as the upload route would (no I/O); only when the whole
file is good is the execution created and the second pass uploads the
batches. A format error answers 400 naming the line, element or field and
the byte offset; a record the upload rules refuse answers 400 naming its
position among the file's observations.

The file is checked against the task's scope (its targets, ports and
transports), like a scanner's uploads: rows outside it answer 400
``import_out_of_scope`` listing the first of them, so an import cannot put
results for arbitrary addresses into the user's and the global view. An
administrator may import a file as it is with ``scope=ignore``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.agent.formats import FORMATS, ResultFormatError, iso_utc
from app.agent.json_lines import reader_for
from app.config import Settings
from app.db import transaction
from app.errors import Forbidden, NotFound, ValidationError
from app.identity.users import User
from app.observability import emit
from app.result_ingest.parse import parse_upload
from app.result_ingest.scope import check_scope
from app.result_ingest.service import handle_upload
from app.scan_control.imports import (
    create_import_execution,
    fail_import_execution,
    renew_import_lease,
)
from app.scan_control.query import get_task
from app.search.port import SearchStore
from app.upload_protocol import canonical_checksum

OBSERVED_AT_MODES = ("file", "import")
SCOPE_MODES = ("check", "ignore")
MAX_LISTED_OUTSIDE = 20


@dataclass(frozen=True)
class _Scope:
    targets: list[str]
    ports: str
    transports: list[str]


@dataclass(frozen=True)
class ImportResult:
    execution_id: int
    task_id: int
    format: str
    observations: int
    batches: int
    seconds: float

    def public(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "task_id": self.task_id,
            "format": self.format,
            "observations": self.observations,
            "batches": self.batches,
        }


def check_format(format_name: str | None) -> str:
    if format_name not in FORMATS:
        raise ValidationError(
            f"format must be one of {', '.join(FORMATS)}",
            code="invalid_format",
            details={"field": "format", "allowed": list(FORMATS)},
        )
    return format_name


@dataclass(frozen=True)
class _Times:
    """``default``: for records without a time of their own; ``override``: for every record.
    Read once per import so both passes produce identical batches."""

    default: str
    override: str | None


def _observations(
    path: Path, format_name: str, states: set[str], times: _Times
) -> Iterator[dict[str, Any]]:
    reader = reader_for(format_name)
    with open(path, "rb") as handle:
        for item in reader(handle, default_observed_at=times.default):
            if item["state"] not in states:
                continue
            if times.override is not None:
                item["observed_at"] = times.override
            yield item


def _batches(
    path: Path, format_name: str, settings: Settings, times: _Times
) -> Iterator[list[dict[str, Any]]]:
    """Batches of the file's observations; the last (possibly empty) one is the final."""
    size = settings.ingest.max_observations_per_batch
    batch: list[dict[str, Any]] = []
    for item in _observations(path, format_name, set(settings.agent.report_states), times):
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    yield batch


def _body(
    token: str, upload_id: str, index: int, final: bool, items: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "protocol_version": 1,
        "claim_token": token,
        "upload_id": upload_id,
        "stream": "main",
        "batch_index": index,
        "is_final": final,
        "checksum": canonical_checksum(items, []),
        "observations": items,
        "dns_records": [],
    }


def _lookahead(batches: Iterator[list[dict[str, Any]]]) -> Iterator[tuple[list[Any], bool]]:
    """(batch, is_last) pairs."""
    previous = next(batches)
    for batch in batches:
        yield previous, False
        previous = batch
    yield previous, True


def _format_error(exc: ResultFormatError, format_name: str) -> ValidationError:
    return ValidationError(
        f"the {format_name} file cannot be read: {exc}",
        code="invalid_import_file",
        details={"format": format_name, **exc.details()},
    )


def _outside(
    exc: ValidationError, index: int, size: int, batch: list[dict[str, Any]], format_name: str
) -> ValidationError:
    rows: dict[int, dict[str, Any]] = {}
    for item in (exc.details or {}).get("items") or []:
        position = int(item.get("index") or 0)
        observation = batch[position] if position < len(batch) else {}
        row = rows.setdefault(
            position,
            {
                "observation": index * size + position + 1,
                "ip": observation.get("ip"),
                "port": observation.get("port"),
                "transport": observation.get("transport"),
                "fields": [],
            },
        )
        row["fields"].append(item.get("field"))
    listed = list(rows.values())[:MAX_LISTED_OUTSIDE]
    first = ", ".join(f"{r['ip']} port {r['port']}/{r['transport']}" for r in listed[:5])
    return ValidationError(
        f"the file has results outside the task's targets, ports or transports "
        f"(observation {listed[0]['observation']} first: {first}); an administrator may "
        "import it with scope=ignore",
        code="import_out_of_scope",
        details={"format": format_name, "outside": listed},
    )


def validate_file(
    path: Path,
    format_name: str,
    settings: Settings,
    times: _Times,
    scope: _Scope | None = None,
) -> tuple[int, int]:
    """Pass 1: every record parsed and every batch validated; (observations, batches)."""
    placeholder = str(uuid.uuid4())
    size = settings.ingest.max_observations_per_batch
    total = batches = 0
    try:
        for index, (batch, last) in enumerate(
            _lookahead(_batches(path, format_name, settings, times))
        ):
            try:
                body = parse_upload(
                    _body(placeholder, "import", index, last, batch), settings.ingest
                )
                if scope is not None:
                    try:
                        check_scope(
                            kind="ports",
                            targets=scope.targets,
                            ports=scope.ports,
                            transports=scope.transports,
                            body=body,
                        )
                    except ValidationError as exc:
                        raise _outside(exc, index, size, batch, format_name) from None
            except ValidationError as exc:
                if exc.code == "import_out_of_scope":
                    raise
                items = (exc.details or {}).get("items") or [{}]
                first = items[0]
                position = index * size + int(first.get("index") or 0)
                raise ValidationError(
                    f"observation {position + 1} of the file is not acceptable: "
                    f"{first.get('field') or ''} {first.get('message') or exc.message}".strip(),
                    code="invalid_import_file",
                    details={
                        "format": format_name,
                        "observation": position + 1,
                        "field": first.get("field"),
                        "problems": items[:20],
                    },
                ) from None
            total += len(batch)
            batches += 1
    except ResultFormatError as exc:
        raise _format_error(exc, format_name) from None
    except (RecursionError, OverflowError, UnicodeError, LookupError) as exc:
        # The readers name what they know to be wrong; anything else a file can provoke
        # is still the file's fault: a 400 saying how far the file was read, not a 500.
        raise ValidationError(
            f"the {format_name} file cannot be read after observation {total}: "
            f"{type(exc).__name__}: {str(exc)[:200]}",
            code="invalid_import_file",
            details={"format": format_name, "observation": total + 1},
        ) from None
    return total, batches


# How often a long import says how far it is (the command line's progress).
PROGRESS_SECONDS = 2.0


def import_results(
    *,
    settings: Settings,
    store: SearchStore,
    user: User,
    task_id: int,
    path: Path,
    format_name: str,
    observed_at_mode: str = "file",
    request_id: str | None = None,
    scope_mode: str = "check",
    progress: Callable[[str], None] | None = None,
) -> ImportResult:
    """Import ``path`` into the task as a run of its own. ``progress`` (the command
    line's) hears what is done: the file checked, then observations sent as they go."""
    check_format(format_name)
    if scope_mode not in SCOPE_MODES:
        raise ValidationError(
            "scope must be 'check' (the default) or 'ignore'",
            code="invalid_parameter",
            details={"parameter": "scope", "allowed": list(SCOPE_MODES)},
        )
    if scope_mode == "ignore" and not user.is_admin:
        raise Forbidden(
            "only an administrator may import results outside the task's scope",
            code="scope_ignore_forbidden",
        )
    if observed_at_mode not in OBSERVED_AT_MODES:
        raise ValidationError(
            "observed_at must be 'file' (the scan's own times) or 'import' (now)",
            code="invalid_parameter",
            details={"parameter": "observed_at", "allowed": list(OBSERVED_AT_MODES)},
        )
    with transaction("import_task_check") as conn:
        task = get_task(conn, user, task_id)
    if task is None:
        raise NotFound("task not found", code="task_not_found")
    scope = (
        _Scope(list(task["targets"] or []), task["ports"] or "", list(task["transports"] or []))
        if scope_mode == "check"
        else None
    )
    started = time.perf_counter()
    now = iso_utc(datetime.now(UTC))
    times = _Times(default=now, override=now if observed_at_mode == "import" else None)
    if progress:
        progress(f"checking {path.name} ({format_name}) against task {task_id}")
    expected, _ = validate_file(path, format_name, settings, times, scope)
    if progress:
        progress(f"{expected} observations to import")
    told = time.monotonic()
    lease = settings.scan.execution_lease_seconds
    with transaction("import_execution_create") as conn:
        execution = create_import_execution(conn, task_id=task_id, lease_seconds=lease)
    token = str(execution.claim_token)
    upload_id = f"import-{execution.id}"
    emit(
        "ResultImportStarted",
        execution_id=execution.id,
        task_id=task_id,
        format=format_name,
        observations=expected,
    )
    sent = batches = 0
    renewed = time.monotonic()
    try:
        source = _batches(path, format_name, settings, times)
        for index, (batch, last) in enumerate(_lookahead(source)):
            if time.monotonic() - renewed > lease / 3:
                with transaction("import_lease_renew") as conn:
                    renew_import_lease(
                        conn,
                        execution_id=execution.id,
                        claim_token=execution.claim_token,
                        lease_seconds=lease,
                    )
                renewed = time.monotonic()
            handle_upload(
                settings=settings,
                store=store,
                execution_id=execution.id,
                scanner_id=None,
                raw=_body(token, upload_id, index, last, batch),
                request_id=request_id,
            )
            sent += len(batch)
            batches += 1
            if progress and (last or time.monotonic() - told >= PROGRESS_SECONDS):
                batch_word = "batch" if batches == 1 else "batches"
                progress(f"imported {sent} of {expected} observations ({batches} {batch_word})")
                told = time.monotonic()
    except BaseException as exc:
        with transaction("import_execution_fail") as conn:
            fail_import_execution(
                conn,
                execution_id=execution.id,
                claim_token=execution.claim_token,
                reason=f"import failed: {type(exc).__name__}: {exc}"[:2000],
            )
        emit("ResultImportFailed", execution_id=execution.id, error=type(exc).__name__)
        raise
    seconds = time.perf_counter() - started
    emit(
        "ResultImportSucceeded",
        execution_id=execution.id,
        task_id=task_id,
        format=format_name,
        observations=sent,
        batches=batches,
        seconds=round(seconds, 3),
    )
    return ImportResult(
        execution_id=execution.id,
        task_id=task_id,
        format=format_name,
        observations=sent,
        batches=batches,
        seconds=seconds,
    )
