"""`netmap bench search --rule-changes N,…`: the alert rules' search filters at N changes.

A rule filtered by a search asks, for each change of a run, whether the current asset at
the change's endpoint matches the search (``app.alerts.evaluate.search_matches``, inside
the analysis's transaction). Its cost should follow the run's changes, not the estate:
a scan that changed a thousand endpoints among ten million assets should cost what it
costs among one million.

On the bench search's seeded assets this writes a change set of N of the owner's
endpoints (spread over the estate by their hashed keys, plus every endpoint of the rare
host's address so the rare searches find something), makes one rule per query (a real
channel and rule, ``app.alerts``), and times ``search_matches`` with that rule alone
enabled, ``repeats`` times. Only ever used on scratch databases.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import sqlalchemy as sa

from app.bench.stats import summary_ms

# The endpoints of the address the rare queries name (``10.0.77.7``) and N others.
_CHANGE_SET = """
    INSERT INTO analysis_changes (owner_id, execution_id, task_id, finished_at, kind, ip, port,
                                  transport, old_state, new_state, new_service, new_product,
                                  new_version)
    SELECT :owner_id, :execution_id, :task_id, now(), 'changed', a.ip, a.port, a.transport,
           'open', 'open', a.service, a.product, a.version
      FROM ((SELECT ip, port, transport, service, product, version FROM search_assets_user
              WHERE owner_id = :owner_id ORDER BY key LIMIT :changes)
            UNION
            (SELECT ip, port, transport, service, product, version FROM search_assets_user
              WHERE owner_id = :owner_id AND ip = '10.0.77.7')) AS a
"""


def time_rule_searches(
    store: Any,
    user: Any,
    execution_id: int,
    task_id: int,
    sizes: list[int],
    queries: dict[str, str],
    repeats: int,
    settings: Any,
) -> dict[str, dict[str, Any]]:
    """{changes: {query name: timings and the changes found}} for each change-set size."""
    from app.alerts.channels import create_channel
    from app.alerts.evaluate import search_matches
    from app.alerts.rules import create_rule, delete_rule, update_rule
    from app.bench.scratch import vacuum_analyze
    from app.db import transaction

    owner_id = user.id
    channel = create_channel(
        settings, user, {"kind": "webhook", "url": "https://alerts.example.com/hook"}
    )
    rules = {
        name: create_rule(
            user,
            {
                "name": f"bench {name}",
                "on": ["changed"],
                "channels": [channel["id"]],
                "filter": {"query": text},
                "enabled": False,
            },
            store=store,
        )["id"]
        for name, text in queries.items()
    }
    results: dict[str, dict[str, Any]] = {}
    for size in sizes:
        with transaction() as conn:
            conn.execute(
                sa.text("DELETE FROM analysis_changes WHERE execution_id = :e"),
                {"e": execution_id},
            )
            written = conn.execute(
                sa.text(_CHANGE_SET),
                {
                    "owner_id": owner_id,
                    "execution_id": execution_id,
                    "task_id": task_id,
                    "changes": size,
                },
            ).rowcount
        vacuum_analyze("analysis_changes")
        by_query: dict[str, Any] = {}
        for name, rule_id in rules.items():
            update_rule(user, rule_id, {"enabled": True}, store=store)
            samples = []
            found = 0
            for _ in range(repeats):
                begin = time.perf_counter()
                with transaction() as conn:
                    found = len(
                        search_matches(
                            conn,
                            store,
                            owner_id=owner_id,
                            execution_id=execution_id,
                            changes=written,
                        )
                    )
                samples.append(time.perf_counter() - begin)
            update_rule(user, rule_id, {"enabled": False}, store=store)
            by_query[name] = {"q": queries[name], **summary_ms(samples), "found": found}
            print(
                f"[rule search] {written} changes, {name}: p95 {by_query[name]['p95_ms']} ms",
                file=sys.stderr,
            )
        results[str(size)] = {"changes": written, "queries": by_query}
    for rule_id in rules.values():
        delete_rule(user, rule_id)
    return results
