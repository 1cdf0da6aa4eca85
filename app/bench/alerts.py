"""`netmap bench alerts`: rule evaluation and commit-to-delivered time of one change set.

On a scratch database: one owner, 3 webhook channels at a local receiver (a threaded
HTTP server in this process that verifies every Standard Webhooks signature), 10 rules
in ``digest`` mode (``--mode each``: single messages up to the cap, the rest digested)
with varied kinds and filters (ports, services, CIDRs, fields), and a run of one
execution whose change set has ``--changes`` rows generated in SQL (mixed new, changed,
gone, reappeared). Timed:

* ``evaluation_seconds``: the set-based statement that turns the change set into alert
  messages, and (the run's only change set being its last) the run's digests
  (``app.alerts.evaluate.alerts_for_change_set``, as the analysis runs it inside its
  transaction), and their commit; ``changes_evaluated_per_s`` is changes over that time;
  ``changes_evaluated_per_cpu_s`` is the same over the scratch server's CPU seconds
  meanwhile (the rate on an idle machine: the work is one backend's statement);
* ``commit_to_delivered_seconds``: from that commit until every message is delivered by
  the delivery job's own code (``claim_next`` + ``deliver``), ``--workers`` threads.

Printed as one JSON object, with the load average (the machine may be shared).
"""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import click
import sqlalchemy as sa

from app.bench.executions import finished_execution
from app.db import transaction

_SEED_CHANGES = """
    INSERT INTO analysis_changes (owner_id, execution_id, task_id, finished_at, kind, ip, port,
                                  transport, old_state, old_service, old_product, old_version,
                                  new_state, new_service, new_product, new_version)
    SELECT :owner_id, :execution_id, :task_id, now(),
           (ARRAY['new', 'changed', 'gone', 'reappeared'])[n % 4 + 1],
           '10.0.0.0'::inet + (n / 5), (ARRAY[22, 80, 443, 3306, 8080])[n % 5 + 1], 'tcp',
           'open', (ARRAY['ssh', 'http', 'https', 'mysql', 'http-proxy'])[n % 5 + 1],
           'product', '1.0',
           'open', (ARRAY['ssh', 'http', 'https', 'mysql', 'http-proxy'])[n % 5 + 1],
           CASE WHEN n % 4 = 1 THEN 'product-2' ELSE 'product' END,
           CASE WHEN n % 8 = 1 THEN '2.0' ELSE '1.0' END
      FROM generate_series(:low, :high - 1) AS n
"""

RULES: list[dict[str, Any]] = [
    {"on": ["new", "changed", "gone", "reappeared"]},
    {"on": ["gone"]},
    {"on": ["new"], "ports": [22, 3306]},
    {"on": ["changed"], "fields": ["product"]},
    {"on": ["changed"], "fields": ["version"]},
    {"on": ["new", "reappeared"], "services": ["http", "https"]},
    {"on": ["gone"], "cidrs": ["10.0.0.0/16"]},
    {"on": ["new", "gone"], "ports": [443]},
    {"on": ["changed", "gone"], "services": ["ssh"]},
    {"on": ["reappeared"]},
]


class _Receiver:
    def __init__(self, secrets: list[str]) -> None:
        from standardwebhooks.webhooks import Webhook

        self.hooks = [Webhook(s) for s in secrets]
        self.ids: set[str] = set()
        self.bad = 0
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                index = int(self.path.rsplit("/", 1)[1])
                try:
                    receiver.hooks[index].verify(body, headers)
                    ok = True
                except Exception:  # noqa: BLE001 - any failure is a bad signature here
                    ok = False
                with receiver.lock:
                    receiver.ids.add(headers.get("webhook-id", ""))
                    receiver.bad += 0 if ok else 1
                self.send_response(200 if ok else 401)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@click.command("alerts")
@click.option("--changes", type=click.IntRange(100, 2_000_000), default=100_000, show_default=True)
@click.option("--workers", type=click.IntRange(1, 16), default=2, show_default=True)
@click.option(
    "--mode",
    type=click.Choice(["digest", "each"]),
    default="digest",
    show_default=True,
    help="the rules' mode: one digest per channel, or capped single messages and a digest",
)
def command(changes: int, workers: int, mode: str) -> None:
    """Time alert rule evaluation and delivery of one change set of N changes."""
    from app.alerts.channels import new_secret
    from app.alerts.deliveries import claim_next, deliver
    from app.alerts.evaluate import ChangeSet, alerts_for_change_set
    from app.bench.cpu import server_cpu_seconds
    from app.bench.scratch import scratch_database
    from app.identity.secrets_at_rest import SecretBox

    with scratch_database(
        overrides={"alerts": {"allow_private_targets": True, "retry_base_seconds": 0.05}},
        server_tuning={"shared_buffers": "256MB"},
    ) as scratch:
        settings = scratch.settings
        secrets = [new_secret() for _ in range(3)]
        receiver = _Receiver(secrets)
        box = SecretBox(settings.security)
        with transaction() as conn:
            owner = conn.execute(
                sa.text(
                    "INSERT INTO users (username, password_hash) VALUES ('b', 'x') RETURNING id"
                )
            ).scalar_one()
            channel_ids = [
                conn.execute(
                    sa.text(
                        "INSERT INTO alert_channels (owner_id, name, kind, url, secret_encrypted)"
                        " VALUES (:o, :n, 'webhook', :u, :s) RETURNING id"
                    ),
                    {
                        "o": owner,
                        "n": f"hook {i}",
                        "u": f"http://127.0.0.1:{receiver.port}/hook/{i}",
                        "s": box.encrypt(secret),
                    },
                ).scalar_one()
                for i, secret in enumerate(secrets)
            ]
            for n, rule in enumerate(RULES):
                conn.execute(
                    sa.text(
                        "INSERT INTO alert_rules (owner_id, name, on_kinds, fields, cidrs, ports, "
                        "services, channel_ids, mode) VALUES (:o, :name, :on, :fields, "
                        "CAST(:cidrs AS cidr[]), :ports, :services, :channels, :mode)"
                    ),
                    {
                        "o": owner,
                        "name": f"rule {n}",
                        "on": rule["on"],
                        "fields": rule.get("fields", []),
                        "cidrs": rule.get("cidrs", []),
                        "ports": rule.get("ports", []),
                        "services": rule.get("services", []),
                        "channels": channel_ids,
                        "mode": mode,
                    },
                )
            task_id, execution_id, run_id = finished_execution(
                conn, owner, targets=["10.0.0.0/8"], ports="22"
            )
            # The run's one execution has finished: its change set is the run's last, so
            # the digests are created with it, as the analysis does.
            conn.execute(
                sa.text(
                    "UPDATE task_runs SET status = 'succeeded', started_at = now(), "
                    "finished_at = now() WHERE id = :r"
                ),
                {"r": run_id},
            )
        for low in range(0, changes, 200_000):
            with transaction() as conn:
                conn.execute(
                    sa.text(_SEED_CHANGES),
                    {
                        "owner_id": owner,
                        "execution_id": execution_id,
                        "task_id": task_id,
                        "low": low,
                        "high": min(changes, low + 200_000),
                    },
                )
        with transaction() as conn:
            conn.execute(sa.text("ANALYZE analysis_changes"))

        pgdata = scratch.directory / "pgdata"
        server_cpu = server_cpu_seconds(pgdata)
        started = time.perf_counter()
        with transaction() as conn:
            created = alerts_for_change_set(
                conn,
                settings.alerts,
                ChangeSet(owner, execution_id, task_id, run_id),
                changes=changes,
            )
        committed = time.perf_counter()
        evaluation = committed - started
        evaluation_cpu = server_cpu_seconds(pgdata) - server_cpu

        outcomes: list[str] = []

        def work() -> None:
            while True:
                claim = claim_next(settings.alerts)
                if claim is None:
                    with transaction() as conn:
                        left = conn.execute(
                            sa.text(
                                "SELECT count(*) FROM alert_deliveries WHERE status = 'pending'"
                            )
                        ).scalar()
                    if not left:
                        return
                    time.sleep(0.01)
                    continue
                outcomes.append(deliver(settings, claim))

        threads = [threading.Thread(target=work) for _ in range(workers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        delivered = time.perf_counter() - committed
        receiver.server.shutdown()
        result = {
            "benchmark": "alerts",
            "changes": changes,
            "rules": len(RULES),
            "mode": mode,
            "channels": len(channel_ids),
            "messages": created,
            "evaluation_seconds": round(evaluation, 3),
            "changes_evaluated_per_s": round(changes / evaluation),
            "evaluation_server_cpu_seconds": round(evaluation_cpu, 3),
            "changes_evaluated_per_cpu_s": round(changes / evaluation_cpu)
            if evaluation_cpu > 0
            else None,
            "commit_to_delivered_seconds": round(delivered, 3),
            "delivered": outcomes.count("delivered"),
            "not_delivered": len(outcomes) - outcomes.count("delivered"),
            "receiver_ids": len(receiver.ids),
            "bad_signatures": receiver.bad,
            "workers": workers,
            "load_average_1m": round(os.getloadavg()[0], 2),
        }
        click.echo(json.dumps(result))
