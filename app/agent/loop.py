"""The agent loop: claim, keep the lease, scan, upload exactly once (AGT-1 … AGT-4).

``Agent.run`` first finishes what a previous run left in the spool, then
claims executions until told to stop (or once, with ``--once``). For each
execution a heartbeat thread renews the lease every third of its length; the
scanner's output is parsed as it arrives and uploaded in batches of
``[agent] batch_size``, each batch spooled before it is sent; the last batch
is the final one. No work (204) and an unavailable server (503, 5xx,
connection errors) back off, honouring ``Retry-After``.

Stopping: a lost lease (409 ``lease_lost`` from any call) stops the scanner's
process group and drops the spool without reporting; a cancelled execution (409
``execution_cancelled``: its run was cancelled) does the same and ends the
execution cleanly (exit status 0 with ``--once``, the next claim otherwise); a scanner that exits
non-zero, output that is not a complete document, or a scan stopped by
SIGTERM after the grace period is reported with ``fail`` and the stderr tail.
"""

from __future__ import annotations

import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.agent.about import detect
from app.agent.client import (
    Execution,
    ExecutionCancelled,
    LeaseLost,
    MalformedClaim,
    Rejected,
    RetryLater,
    ScannerClient,
    encode_body,
    upload_body,
)
from app.agent.events import EventLog
from app.agent.formats import STATES, ResultFormatError
from app.agent.profiles import effective_profile
from app.agent.scanners import ScanProcess, masscan_command, nmap_command, split_targets_by_family
from app.agent.spool import ExecutionSpool, Spool, SpoolPathError
from app.agent.targets import TargetRefused, check_execution
from app.config import AgentSettings, ScanSettings

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_FAILED = 3
EXIT_LEASE_LOST = 4
# ``--once`` is for cron and scripts: a server it cannot reach within this many claims
# (backing off between them, some 15 s in all) ends it with EXIT_ERROR; the
# long-running agent keeps trying.
ONCE_CLAIM_ATTEMPTS = 6


class _ExecutionFailed(Exception):
    """The execution cannot succeed; the reason goes to the server."""


class _Stopped(Exception):
    """The agent must exit while a batch is still unsent (server unreachable past the
    grace period after SIGTERM); the spool keeps the execution for the next start."""


def lease_interval(lease_expires_at: str, *, minimum: float = 1.0) -> float:
    """A third of the lease's remaining length (our clock against the server's)."""
    try:
        expires = datetime.fromisoformat(lease_expires_at.replace("Z", "+00:00"))
        remaining = (expires - datetime.now(UTC)).total_seconds()
    except ValueError:
        remaining = 30.0
    if remaining <= 0:  # clocks disagree: renew often rather than late
        remaining = 30.0
    return max(minimum, remaining / 3)


class Heartbeat(threading.Thread):
    """Renews the lease on its own HTTP session; on a lost lease calls ``on_lost`` once."""

    def __init__(
        self,
        client: ScannerClient,
        execution: Execution,
        interval: float,
        on_lost: Callable[[], None],
        log: EventLog,
    ):
        super().__init__(name=f"heartbeat-{execution.id}", daemon=True)
        self.client = client
        self.execution = execution
        self.interval = interval
        self.on_lost = on_lost
        self.log = log
        self.lost = threading.Event()
        self.cancelled = False  # the loss was 409 execution_cancelled
        self.reason = ""
        self._stop_event = threading.Event()

    def run(self) -> None:
        wait = self.interval
        while not self._stop_event.wait(wait):
            try:
                self.client.renew(self.execution.id, self.execution.claim_token)
                wait = self.interval
            except (LeaseLost, Rejected) as exc:
                self.cancelled = isinstance(exc, ExecutionCancelled)
                # A cancel (or a deleted task) learnt at renewal is no lost lease.
                what = "cancelled by the server" if self.cancelled else "lease lost"
                self.log.emit(
                    "AgentCancelledAtRenewal" if self.cancelled else "AgentLeaseLost",
                    f"execution {self.execution.id}: {what} ({exc})",
                    execution_id=self.execution.id,
                    error=str(exc),
                )
                self.reason = str(exc)
                self.lost.set()
                self.on_lost()
                return
            except RetryLater as exc:
                wait = max(0.5, min(self.interval / 3, exc.retry_after or self.interval / 3))
                self.log.emit(
                    "AgentLeaseRenewRetry",
                    f"execution {self.execution.id}: lease renewal failed, retrying ({exc})",
                    execution_id=self.execution.id,
                    error=str(exc),
                )

    def stop(self) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout=self.client.timeout + 5)


class Agent:
    def __init__(
        self,
        *,
        server: str,
        token: str,
        settings: AgentSettings,
        kinds: list[str],
        engine: str = "nmap",
        spool_root: Path,
        log: EventLog,
        once: bool = False,
        dns_resolve: Callable[[str], list[dict[str, Any]]] | None = None,
        observation_source: Callable[[Execution], Iterator[dict[str, Any]]] | None = None,
        scan_settings: ScanSettings | None = None,
        about: dict[str, Any] | None = None,
    ):
        """``observation_source``: replaces the scanner for ports executions (the benchmark
        replays a result file through the real upload path with it). ``about``: what the
        agent reports about itself (default: detected now, ``app.agent.about``)."""
        bad = [s for s in settings.report_states if s not in STATES]
        if bad:
            raise ValueError(f"[agent] report_states: unknown state(s) {bad}")
        self.server = server
        self.token = token
        self.settings = settings
        # The target rules the agent applies to every execution (app.agent.targets).
        self.scan_settings = scan_settings or ScanSettings()
        self.kinds = kinds
        self.engine = engine
        self.log = log
        self.once = once
        # Asked once per start; sent with every claim and renewal (app.agent.about).
        self.about = about if about is not None else detect(settings)
        self.client = ScannerClient(
            server, token, timeout=settings.request_timeout_seconds, about=self.about
        )
        self.spool = Spool(spool_root, server)
        self.stopping = threading.Event()
        self.stop_reason: str | None = None
        self.stopped_at: float | None = None
        self._dns_resolve = dns_resolve
        self._observation_source = observation_source
        self._scan: ScanProcess | None = None

    # -- signals ------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """SIGTERM/SIGINT: claim nothing more; the running scan gets the grace period."""
        if self.stopping.is_set():
            return
        self.stop_reason = reason
        self.stopped_at = time.monotonic()
        self.stopping.set()
        self.log.emit(
            "AgentStopping",
            f"{reason}: no new claims; the running scan may finish for "
            f"{self.settings.shutdown_grace_seconds:g}s",
            reason=reason,
            grace_seconds=self.settings.shutdown_grace_seconds,
        )

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.request_stop("SIGTERM"))
        signal.signal(signal.SIGINT, lambda *_: self.request_stop("SIGINT"))

    # -- loop -----------------------------------------------------------------
    def run(self) -> int:
        status = EXIT_OK
        try:
            for pending in self.spool.pending():
                if self.stopping.is_set():
                    return status
                status = self._resume(pending)
                if self.once:
                    return status
            backoff = 0.5
            failed_claims = 0
            while not self.stopping.is_set():
                try:
                    execution = self.client.claim(self.kinds)
                except Rejected as exc:  # a wrong token or URL: repeating cannot help
                    self.log.emit(
                        "AgentClaimRejected",
                        f"the server refused the claim: {exc}",
                        error=str(exc),
                        status=exc.status,
                    )
                    return EXIT_ERROR
                except MalformedClaim as exc:
                    # Nothing of it is acted on (its identifiers would name paths and URLs);
                    # the server's lease on it runs out and the execution is claimed again.
                    delay = backoff
                    backoff = min(backoff * 2, self.settings.idle_backoff_max_seconds)
                    self.log.emit(
                        "AgentClaimMalformed",
                        f"the server's claim answer is malformed ({exc}); retrying in {delay:g}s",
                        error=str(exc),
                        delay_seconds=delay,
                    )
                    self.stopping.wait(delay)
                    continue
                except RetryLater as exc:
                    failed_claims += 1
                    if self.once and failed_claims >= ONCE_CLAIM_ATTEMPTS:
                        self.log.emit(
                            "AgentClaimGaveUp",
                            f"claim failed {failed_claims} times ({exc}); giving up (--once)",
                            error=str(exc),
                            attempts=failed_claims,
                        )
                        return EXIT_ERROR
                    delay = exc.retry_after if exc.retry_after is not None else backoff
                    backoff = min(backoff * 2, self.settings.idle_backoff_max_seconds)
                    self.log.emit(
                        "AgentClaimRetry",
                        f"claim failed ({exc}); retrying in {delay:g}s",
                        error=str(exc),
                        delay_seconds=delay,
                    )
                    self.stopping.wait(delay)
                    continue
                if execution is None:
                    if self.once:
                        self.log.emit("AgentNoWork", "no work to claim", server=self.server)
                        return EXIT_OK
                    self.stopping.wait(backoff)
                    backoff = min(backoff * 2, self.settings.idle_backoff_max_seconds)
                    continue
                backoff = 0.5
                status = self._start(execution)
                if self.once:
                    return status
            return status
        finally:
            self.client.close()
            self.spool.close()

    def _start(self, execution: Execution) -> int:
        try:
            checked = check_execution(
                execution.kind,
                execution.targets,
                execution.ports,
                self.scan_settings,
                self.settings.allowed_networks,
            )
        except TargetRefused as exc:
            return self._refuse(execution, str(exc))
        execution = replace(execution, targets=checked.targets, ports=checked.ports)
        upload_id = f"agent-{execution.id}-{execution.attempt}-{uuid.uuid4().hex[:12]}"
        try:
            spool = self.spool.create(execution, upload_id, self.server)
        except SpoolPathError as exc:
            self.log.emit("AgentSpoolRefused", f"execution {execution.id}: {exc}", error=str(exc))
            return EXIT_ERROR
        self.log.emit(
            "AgentExecutionClaimed",
            f"execution {execution.id} (task {execution.task_id}, {execution.kind}, "
            f"{len(execution.targets)} targets, ports {execution.ports or '-'}) claimed",
            execution_id=execution.id,
            task_id=execution.task_id,
            kind=execution.kind,
            targets=len(execution.targets),
            attempt=execution.attempt,
        )
        return _ExecutionRun(self, execution, upload_id, spool).run(resume=False)

    def _refuse(self, execution: Execution, reason: str) -> int:
        """An execution the agent will not scan: reported failed with the reason."""
        reason = f"refused by the agent: {reason}"
        self.log.emit(
            "AgentExecutionRefused",
            f"execution {execution.id}: {reason}",
            execution_id=execution.id,
            reason=reason,
        )
        try:
            self.client.fail(execution.id, execution.claim_token, reason)
        except (LeaseLost, RetryLater, Rejected) as exc:
            self.log.emit(
                "AgentFailReportFailed",
                f"execution {execution.id}: could not report the refusal ({exc})",
                execution_id=execution.id,
                error=str(exc),
            )
        return EXIT_FAILED

    def _resume(self, spool: ExecutionSpool) -> int:
        try:
            state = spool.load()
            execution = Execution.from_claim(state["execution"])
            if not isinstance(state.get("upload_id"), str):
                raise MalformedClaim("no upload id")
        except (OSError, ValueError, KeyError, TypeError, MalformedClaim) as exc:
            self.log.emit(
                "AgentSpoolUnreadable",
                f"{spool.directory}: unreadable spool state ({exc}); dropped",
                error=str(exc),
            )
            spool.remove()
            return EXIT_ERROR
        self.log.emit(
            "AgentExecutionResumed",
            f"execution {execution.id}: resuming upload {state['upload_id']} from the spool",
            execution_id=execution.id,
            upload_id=state["upload_id"],
        )
        return _ExecutionRun(self, execution, state["upload_id"], spool).run(resume=True)


class _ExecutionRun:
    """One execution attempt, from the first batch (or the spool) to final/fail/lease loss."""

    def __init__(self, agent: Agent, execution: Execution, upload_id: str, spool: ExecutionSpool):
        self.agent = agent
        self.execution = execution
        self.upload_id = upload_id
        self.spool = spool
        self.log = agent.log
        self.settings = agent.settings
        self.next_index = 0
        self.sent_observations = 0
        self.saved = 0
        self.batches = 0
        # Time this thread waited for the server's answers (the window of batches in flight
        # full, or the final): how much of the execution the server's ingest took.
        self.upload_wait = 0.0
        self.started = time.monotonic()
        self.lease_lost = threading.Event()
        self.cancelled = False  # 409 execution_cancelled from an upload
        self._heartbeat: Heartbeat | None = None
        # Non-final batches may be in flight together ([agent] upload_concurrency): the
        # protocol orders only the final, which waits for every other batch's answer.
        self._abort = threading.Event()
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: deque[tuple[int, dict[str, Any], Future]] = deque()
        self._local = threading.local()
        self._clients: list[ScannerClient] = []

    # -- life cycle -------------------------------------------------------------
    def run(self, *, resume: bool) -> int:
        heartbeat_client = ScannerClient(
            self.agent.server,
            self.agent.token,
            timeout=self.settings.request_timeout_seconds,
            about=self.agent.about,
        )
        heartbeat = self._heartbeat = Heartbeat(
            heartbeat_client,
            self.execution,
            lease_interval(self.execution.lease_expires_at),
            self._on_lease_lost,
            self.log,
        )
        try:
            if resume:
                # Is the lease still ours? Renewing answers that before anything is re-sent.
                heartbeat_client.renew(self.execution.id, self.execution.claim_token)
            heartbeat.start()
            if resume and self._resend_spooled():
                return self._succeeded()
            if self.execution.kind == "dns":
                self._upload_stream(self._dns_observations(), dns=True)
            else:
                self._scan_and_upload()
            return self._succeeded()
        except LeaseLost as exc:
            if isinstance(exc, ExecutionCancelled):
                self.cancelled = True
            return self._lost(str(exc))
        except Rejected as exc:
            if exc.status == 404:
                return self._lost(str(exc))
            return self._fail(f"the server rejected an upload: {exc}")
        except _ExecutionFailed as exc:
            if self.lease_lost.is_set():
                return self._lost("lease lost while the scanner ran")
            return self._fail(str(exc))
        except RetryLater as exc:  # only from the resume's first renewal
            return self._fail_local(f"server unreachable while resuming: {exc}")
        except _Stopped as exc:
            return self._fail_local(str(exc))
        finally:
            self._abort.set()
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
            for client in self._clients:
                client.close()
            heartbeat.stop()
            heartbeat_client.close()

    def _on_lease_lost(self) -> None:
        self.lease_lost.set()
        scan = self.agent._scan
        if scan is not None:
            scan.stop("lease_lost")

    def _succeeded(self) -> int:
        elapsed = time.monotonic() - self.started
        self.log.emit(
            "AgentExecutionSucceeded",
            f"execution {self.execution.id} succeeded: {self.batches} batches, "
            f"{self.sent_observations} items sent, {self.saved} newly saved, {elapsed:.1f}s",
            execution_id=self.execution.id,
            batches=self.batches,
            items=self.sent_observations,
            saved=self.saved,
            seconds=round(elapsed, 3),
            upload_wait_seconds=round(self.upload_wait, 3),
        )
        self.spool.remove()
        return EXIT_OK

    def _lost(self, why: str) -> int:
        heartbeat = self._heartbeat
        if self.cancelled or (heartbeat is not None and heartbeat.cancelled):
            if heartbeat is not None and heartbeat.cancelled:
                why = heartbeat.reason
            self.log.emit(
                "AgentExecutionCancelled",
                f"execution {self.execution.id}: cancelled by the server, scan stopped ({why})",
                execution_id=self.execution.id,
                error=why,
            )
            self.spool.remove()
            return EXIT_OK
        self.log.emit(
            "AgentExecutionLeaseLost",
            f"execution {self.execution.id}: lease lost, work dropped ({why})",
            execution_id=self.execution.id,
            error=why,
        )
        self.spool.remove()
        return EXIT_LEASE_LOST

    def _fail(self, reason: str) -> int:
        try:
            self.agent.client.fail(self.execution.id, self.execution.claim_token, reason)
        except LeaseLost:
            return self._lost("lease lost before the failure could be reported")
        except (RetryLater, Rejected) as exc:
            self.log.emit(
                "AgentFailReportFailed",
                f"execution {self.execution.id}: could not report the failure ({exc})",
                execution_id=self.execution.id,
                error=str(exc),
            )
        self.log.emit(
            "AgentExecutionFailed",
            f"execution {self.execution.id} failed: {reason}",
            execution_id=self.execution.id,
            reason=reason[-2000:],
        )
        self.spool.remove()
        return EXIT_FAILED

    def _fail_local(self, reason: str) -> int:
        # The spool stays: a later run may still finish the execution while its lease lives.
        self.log.emit(
            "AgentExecutionInterrupted",
            f"execution {self.execution.id}: {reason}",
            execution_id=self.execution.id,
            reason=reason,
        )
        return EXIT_FAILED

    # -- uploads -------------------------------------------------------------
    def _thread_client(self) -> ScannerClient:
        client = getattr(self._local, "client", None)
        if client is None:  # one HTTP session per sending thread
            client = ScannerClient(
                self.agent.server, self.agent.token, timeout=self.settings.request_timeout_seconds
            )
            self._local.client = client
            self._clients.append(client)
        return client

    def _send(
        self, body: dict[str, Any], client: ScannerClient | None = None, data: bytes | None = None
    ) -> int:
        delay = 0.5
        client = client or self.agent.client
        while True:
            if self.lease_lost.is_set():
                raise LeaseLost("lease lost")
            if self._abort.is_set():
                raise _Stopped("upload abandoned: the execution ended")
            try:
                return client.upload(self.execution.id, body, data)
            except RetryLater as exc:
                stopped_at = self.agent.stopped_at
                if (
                    stopped_at is not None
                    and time.monotonic() - stopped_at > self.settings.shutdown_grace_seconds
                ):
                    raise _Stopped(
                        f"stopped ({self.agent.stop_reason}) while batch {body['batch_index']} "
                        f"could not be sent ({exc}); the spool keeps it for the next start"
                    ) from None
                wait = exc.retry_after if exc.retry_after is not None else delay
                delay = min(delay * 2, self.settings.idle_backoff_max_seconds)
                self.log.emit(
                    "AgentUploadRetry",
                    f"execution {self.execution.id} batch {body['batch_index']}: {exc}; "
                    f"retrying in {wait:g}s",
                    execution_id=self.execution.id,
                    batch_index=body["batch_index"],
                    error=str(exc),
                    delay_seconds=wait,
                )
                deadline = time.monotonic() + wait
                while time.monotonic() < deadline and not (
                    self.lease_lost.is_set() or self._abort.is_set()
                ):
                    time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    def _timed_send(self, body: dict[str, Any], data: bytes | None) -> tuple[int, float]:
        started = time.monotonic()
        saved = self._send(body, self._thread_client(), data)
        return saved, time.monotonic() - started

    def _deliver(self, index: int, body: dict[str, Any], data: bytes | None = None) -> None:
        """Send a batch: at once for the final (after every batch in flight was answered),
        else into the window of ``upload_concurrency`` batches in flight. ``data``: the
        body already encoded."""
        concurrency = self.settings.upload_concurrency
        if body["is_final"] or concurrency <= 1:
            self._drain()
            started = time.monotonic()
            saved = self._send(body, data=data)
            seconds = time.monotonic() - started
            self.upload_wait += seconds
            self._record(index, body, saved, seconds)
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="upload")
        self._in_flight.append((index, body, self._pool.submit(self._timed_send, body, data)))
        while len(self._in_flight) >= concurrency:
            self._collect_oldest()

    def _collect_oldest(self) -> None:
        index, body, future = self._in_flight.popleft()
        waiting = time.monotonic()
        try:
            saved, seconds = future.result()  # re-raises LeaseLost / Rejected of that batch
        finally:
            self.upload_wait += time.monotonic() - waiting
        self._record(index, body, saved, seconds)

    def _drain(self) -> None:
        while self._in_flight:
            self._collect_oldest()

    def _record(self, index: int, body: dict[str, Any], saved: int, seconds: float) -> None:
        items = len(body["observations"]) + len(body["dns_records"])
        self.batches += 1
        self.sent_observations += items
        self.saved += saved
        self.log.emit(
            "AgentBatchUploaded",
            f"execution {self.execution.id} batch {index}{' (final)' if body['is_final'] else ''}: "
            f"{items} items, saved {saved} (total {self.sent_observations})",
            execution_id=self.execution.id,
            batch_index=index,
            is_final=body["is_final"],
            items=items,
            saved=saved,
            total_items=self.sent_observations,
            seconds=round(seconds, 3),
        )

    def _batch(self, items: list[dict[str, Any]], *, final: bool, dns: bool) -> None:
        body = upload_body(
            claim_token=self.execution.claim_token,
            upload_id=self.upload_id,
            batch_index=self.next_index,
            is_final=final,
            observations=[] if dns else items,
            dns_records=items if dns else [],
        )
        data = encode_body(body)  # once, for the spool and the request
        self.spool.write_batch(self.next_index, body, data)  # before sending: a crash resends it
        self._deliver(self.next_index, body, data)
        self.next_index += 1

    def _resend_spooled(self) -> bool:
        """Re-send what the previous run spooled; True when that included the final."""
        final = False
        for index, body in self.spool.batches():
            if index != self.next_index:
                break  # a gap can only follow a crash mid-write; the rest is re-scanned
            self._deliver(index, body)
            self.next_index = index + 1
            final = bool(body.get("is_final"))
        self._drain()
        return final

    def _upload_stream(self, items: Iterator[dict[str, Any]], *, dns: bool = False) -> None:
        states = set(self.settings.report_states)
        batch: list[dict[str, Any]] = []
        size = self.settings.batch_size
        for item in items:
            if not dns and item.get("state") not in states:
                continue
            batch.append(item)
            if len(batch) >= size:
                self._batch(batch, final=False, dns=dns)
                batch = []
        self._batch(batch, final=True, dns=dns)

    # -- scanners ----------------------------------------------------------------
    def _scan_and_upload(self) -> None:
        targets_file = self.spool.file("targets.txt")
        if self.agent._observation_source is not None:
            self._upload_stream(self.agent._observation_source(self.execution))
            return
        if not self.execution.targets:
            self._upload_stream(iter(()))
            return
        self._upload_stream(self._scanner_observations(targets_file))

    def _scanner_observations(self, targets_file: Path) -> Iterator[dict[str, Any]]:
        if self.agent.engine == "masscan":
            runs = [(4, self.execution.targets)]
        else:
            runs = split_targets_by_family(self.execution.targets)
        for family, targets in runs:
            targets_file.write_text("\n".join(targets) + "\n")
            if self.agent.engine == "masscan":
                from app.agent.json_lines import read_masscan_json

                command = masscan_command(
                    self.settings, targets_file, self.execution.ports, self.execution.transports
                )
                yield from self._run_scanner(command, read_masscan_json)
            else:
                from app.agent.nmap_xml import read_nmap_xml

                command = nmap_command(
                    self.settings,
                    targets_file,
                    family,
                    self.execution.ports,
                    self.execution.transports,
                    effective_profile(self.execution.profile, self.settings),
                )
                yield from self._run_scanner(command, read_nmap_xml)

    def _run_scanner(self, command: list[str], reader) -> Iterator[dict[str, Any]]:
        if self.agent.stopping.is_set():
            raise _ExecutionFailed(f"agent stopping ({self.agent.stop_reason}) before the scan")
        try:
            scan = ScanProcess(command, self.spool.file("scanner.stderr"))
        except OSError as exc:
            raise _ExecutionFailed(f"could not start {command[0]}: {exc}") from None
        self.agent._scan = scan
        self.log.emit(
            "AgentScanStarted",
            f"execution {self.execution.id}: {' '.join(command[:-2])} … (pid {scan.pid})",
            execution_id=self.execution.id,
            command=command,
            pid=scan.pid,
        )
        watchdog = threading.Thread(target=self._watch, args=(scan,), daemon=True)
        watchdog.start()
        parse_error: ResultFormatError | None = None
        completed = False
        try:
            try:
                yield from reader(scan.chunks())
                completed = True
            except ResultFormatError as exc:
                parse_error = exc
        finally:
            if not completed and parse_error is None:  # the upload side gave up
                scan.stop("uploads stopped")
            outcome = scan.finish()
            self.agent._scan = None
        if self.lease_lost.is_set():
            raise LeaseLost("lease lost while the scanner ran")
        if outcome.stopped_because and outcome.stopped_because != "lease_lost":
            raise _ExecutionFailed(
                f"{command[0]} stopped: {outcome.stopped_because}; exit code {outcome.exit_code}; "
                f"stderr: {outcome.stderr_tail[-1000:]}"
            )
        if outcome.exit_code != 0:
            raise _ExecutionFailed(
                f"{command[0]} exited with code {outcome.exit_code}; "
                f"stderr: {outcome.stderr_tail[-1500:]}"
            )
        if parse_error is not None:
            raise _ExecutionFailed(f"{command[0]} output unreadable: {parse_error}")

    def _watch(self, scan: ScanProcess) -> None:
        """Stops the scan on timeout, or after the grace period once the agent is stopping."""
        deadline = time.monotonic() + self.settings.scan_timeout_seconds
        while scan.process.poll() is None:
            if self.agent.stopping.is_set():
                grace_end = time.monotonic() + self.settings.shutdown_grace_seconds
                while scan.process.poll() is None and time.monotonic() < grace_end:
                    time.sleep(0.1)
                if scan.process.poll() is None:
                    scan.stop(
                        f"agent stopped ({self.agent.stop_reason}) and the scan did not finish "
                        f"within {self.settings.shutdown_grace_seconds:g}s"
                    )
                return
            if time.monotonic() > deadline:
                scan.stop(f"scan timeout ({self.settings.scan_timeout_seconds:g}s)")
                return
            time.sleep(0.1)

    def _dns_observations(self) -> Iterator[dict[str, Any]]:
        from app.agent.resolver import DnsResolver

        resolve = self.agent._dns_resolve or DnsResolver(self.settings).records
        for name in self.execution.targets:
            if self.agent.stopping.is_set() and self.agent.stop_reason:
                raise _ExecutionFailed(f"agent stopped ({self.agent.stop_reason})")
            yield from resolve(name)
