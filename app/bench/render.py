"""`netmap bench render`: renderer latency builtin vs worker, and failures during hot swaps.

Builds two worker releases into a scratch directory (never the configured one),
then measures, through the same registry and leases production uses:
sequential renders per implementation (renders/s, p50/p95, and the worker's
p50 overhead over builtin), and a constant load of client threads while the
registry hot-swaps between the two releases ``--swaps`` times, each swap a
full prepare (process start, handshake, self-test) plus switch and drain.
``failed_during_swaps`` counts calls that failed for any reason (goal: 0).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
from pathlib import Path

import click

from app.bench.progress import Progress
from app.bench.stats import percentile, summary_ms
from app.config import load_settings
from app.modules.errors import ModuleError
from app.modules.registry import ModuleRegistry
from app.modules.report_render import SLOT_NAME, open_candidate, report_render_slot
from app.renderer.contract import self_test_input

RELEASES = ("bench-renderer-a", "bench-renderer-b")


def _report_payload() -> dict:
    """A report-sized input: a summary table of 50 rows and a chart reference."""
    payload = self_test_input()
    payload["template"] = {
        "subject": "[netmap] {{ task.name }}: {{ stats.open_ports }} open ports",
        "html": (
            "<style>td { padding: 2px 6px } th { text-align: left } .hi { color: #b00 }</style>"
            "<h1>{{ task.name }}</h1><p>{{ period.start }} to {{ period.end }}</p>"
            '<img src="{{ image("ports-chart") }}" alt="{{ image_alt("ports-chart") }}">'
            "<table><tr><th>ip</th><th>port</th><th>service</th></tr>"
            "{% for row in rows %}<tr><td>{{ row.ip }}</td>"
            '<td class="{{ "hi" if row.port < 1024 else "" }}">{{ row.port }}</td>'
            "<td>{{ row.service }}</td></tr>{% endfor %}</table>"
        ),
        "version": "bench-1",
    }
    payload["context"]["rows"] = [
        {"ip": f"192.0.2.{i}", "port": 20 + i * 37, "service": "https"} for i in range(50)
    ]
    return payload


def _sequential(registry: ModuleRegistry, payload: dict, count: int, label: str) -> dict:
    progress = Progress(label, count)
    timings = []
    started = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        with registry.acquire(SLOT_NAME) as lease:
            lease.invoke("render", payload)
        timings.append(time.perf_counter() - t0)
        progress.advance()
    elapsed = time.perf_counter() - started
    progress.finish()
    return {"renders_per_s": round(count / elapsed, 1), **summary_ms(timings)}


def _install(settings, registry: ModuleRegistry, release_id: str, revision: int) -> float:
    t0 = time.perf_counter()
    module = open_candidate(settings, release_id)
    registry.install(SLOT_NAME, module, release_id=release_id, revision=revision)
    return time.perf_counter() - t0


def _swaps_under_load(
    settings, registry: ModuleRegistry, payload: dict, swaps: int, clients: int
) -> dict:
    stop = threading.Event()
    lock = threading.Lock()
    counts = {"ok": 0, "failed": 0}
    failures: dict[str, int] = {}
    latencies: list[float] = []

    def client() -> None:
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                with registry.acquire(SLOT_NAME) as lease:
                    lease.invoke("render", payload)
                with lock:
                    counts["ok"] += 1
                    latencies.append(time.perf_counter() - t0)
            except ModuleError as exc:
                with lock:
                    counts["failed"] += 1
                    failures[exc.code] = failures.get(exc.code, 0) + 1

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    progress = Progress("swaps", swaps)
    prepare_times = []
    time.sleep(0.2)
    started = time.perf_counter()
    for index in range(swaps):
        release_id = RELEASES[index % 2]
        prepare_times.append(_install(settings, registry, release_id, revision=10 + index))
        progress.advance()
        time.sleep(0.05)
    stop.set()
    for thread in threads:
        thread.join(30)
    elapsed = time.perf_counter() - started
    progress.finish()
    drain_deadline = time.monotonic() + 30
    while registry.draining() and time.monotonic() < drain_deadline:
        time.sleep(0.05)
    return {
        "swaps": swaps,
        "clients": clients,
        "requests": counts["ok"] + counts["failed"],
        "failed_during_swaps": counts["failed"],
        "failures_by_code": failures,
        "renders_per_s_under_swaps": round(counts["ok"] / elapsed, 1),
        "latency_under_swaps": summary_ms(latencies),
        "swap_prepare_and_switch_p50_ms": round(percentile(prepare_times, 50) * 1000, 1),
        "swap_prepare_and_switch_max_ms": round(max(prepare_times) * 1000, 1),
        "generations_left_draining": len(registry.draining()),
    }


@click.command("render")
@click.option("--renders", default=2000, show_default=True, help="Sequential renders per kind.")
@click.option("--swaps", default=20, show_default=True, help="Hot swaps under constant load.")
@click.option("--clients", default=4, show_default=True, help="Client threads during swaps.")
def command(renders: int, swaps: int, clients: int) -> None:
    """Renderer latency (builtin vs worker) and failed calls during hot swaps."""
    from app.modules.build import build_renderer_release

    scratch = Path(tempfile.mkdtemp(prefix="netmap-bench-render-"))
    try:
        for release_id in RELEASES:
            build_renderer_release(release_id, scratch)
        settings, _ = load_settings(
            env={}, overrides={"report_renderer": {"releases_directory": str(scratch)}}
        )
        payload = _report_payload()
        registry = ModuleRegistry(
            [report_render_slot(settings)],
            drain_timeout=settings.report_renderer.drain_timeout_seconds,
        )
        try:
            _install(settings, registry, "builtin", 1)
            _sequential(registry, payload, min(200, renders), "warm-up builtin")
            builtin = _sequential(registry, payload, renders, "builtin")
            _install(settings, registry, RELEASES[0], 2)
            _sequential(registry, payload, min(200, renders), "warm-up worker")
            worker = _sequential(registry, payload, renders, "worker")
            swapping = _swaps_under_load(settings, registry, payload, swaps, clients)
        finally:
            registry.close(timeout=30)
        result = {
            "benchmark": "render",
            "payload_bytes": len(json.dumps(payload)),
            "builtin": builtin,
            "worker": worker,
            "worker_p50_overhead_ms": round(worker["p50_ms"] - builtin["p50_ms"], 3),
            **swapping,
        }
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    click.echo(json.dumps(result))
