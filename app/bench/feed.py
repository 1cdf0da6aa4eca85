"""`netmap bench feed`: the change feed's pages (``GET /api/changes``) among many changes.

On a scratch database it writes ``--changes`` change rows straight into
``analysis_changes`` (the analysis's own table; the feed reads nothing else): a
``--share`` of them of a small owner, the rest of a large one, interleaved as two
owners' scans interleave. The kinds are drawn by a hash of the row number: 70 % ``new``,
18 % ``changed``, 10 % ``gone``, 2 % ``reappeared``. After ``VACUUM ANALYZE`` it times
``app.analysis.service.owner_changes`` (the function the API and the console's Changes
page call) ``--repeats`` times for each owner, all kinds and ``gone`` only, on the
first page and on the eleventh (ten cursors on); an owner with fewer pages has a null
eleventh. Every page read is checked: of the kind asked for, none repeated across
pages, newest first. One JSON object on stdout, progress on stderr. The goal
(docs/performance.md, "The change feed's index") is a page cost that does not depend on
the number of changes or on the other owner's.
"""

from __future__ import annotations

import json
import sys
import time

import click

_SEED = """
    INSERT INTO analysis_changes
        (owner_id, execution_id, task_id, finished_at, kind, ip, port, transport)
    SELECT CASE WHEN g % :every = 0 THEN :small ELSE :large END, 1 + g / 1000, 1 + g % 7,
           now() - make_interval(secs => :total - g),
           CASE WHEN k < 2 THEN 'reappeared' WHEN k < 12 THEN 'gone'
                WHEN k < 30 THEN 'changed' ELSE 'new' END,
           '10.0.0.0'::inet + g, 22, 'tcp'
      FROM generate_series(:low, :high) g,
           LATERAL (SELECT (hashint4(g::integer) & 1023) % 100 AS k) pick
"""
PAGE = 100


@click.command("feed")
@click.option(
    "--changes", type=click.IntRange(1000, 50_000_000), default=1_000_000, show_default=True
)
@click.option(
    "--share",
    type=click.FloatRange(0.0001, 0.5),
    default=0.01,
    show_default=True,
    help="the small owner's share of the changes",
)
@click.option("--repeats", type=click.IntRange(1, 1000), default=20, show_default=True)
def command(changes: int, share: float, repeats: int) -> None:
    """The change feed's first and eleventh pages among N changes; one JSON object."""
    import sqlalchemy as sa

    from app.bench.progress import Progress
    from app.bench.scratch import scratch_database, vacuum_analyze
    from app.bench.stats import summary_ms
    from app.db import transaction

    small, large = 1, 2
    every = max(1, round(1 / share))
    started = time.monotonic()
    with scratch_database():
        progress = Progress("changes", total=changes)
        for low in range(1, changes + 1, 500_000):
            high = min(changes, low + 499_999)
            with transaction() as conn:
                conn.execute(
                    sa.text(_SEED),
                    {
                        "every": every,
                        "small": small,
                        "large": large,
                        "total": changes,
                        "low": low,
                        "high": high,
                    },
                )
            progress.advance(high - low + 1)
        progress.finish()
        vacuum_analyze("analysis_changes")
        with transaction() as conn:
            held = dict(
                conn.execute(
                    sa.text("SELECT owner_id, count(*) FROM analysis_changes GROUP BY owner_id")
                ).all()
            )
        seeded = time.monotonic() - started
        pages: dict[str, dict] = {}
        for owner, name in ((small, "small"), (large, "large")):
            for kind in (None, "gone"):
                first, deep = _time_pages(owner, kind, repeats)
                label = f"{name}_{kind or 'all'}"
                # An owner with fewer than eleven pages of a kind has no eleventh: null.
                pages[f"{label}_first"] = summary_ms(first) if first else None
                pages[f"{label}_eleventh"] = summary_ms(deep) if deep else None
                print(
                    f"[feed] {label}: {len(first)} first and {len(deep)} eleventh pages timed",
                    file=sys.stderr,
                )
        print(
            json.dumps(
                {
                    "benchmark": "feed",
                    "changes": changes,
                    "changes_by_owner": {"small": held.get(small, 0), "large": held.get(large, 0)},
                    "page_size": PAGE,
                    "repeats": repeats,
                    "seed_seconds": round(seeded, 1),
                    "pages": pages,
                    "checked": True,
                }
            )
        )


def _time_pages(owner: int, kind: str | None, repeats: int) -> tuple[list[float], list[float]]:
    """(first-page seconds, eleventh-page seconds) over ``repeats`` walks, each page
    checked against the feed's promises."""
    from app.analysis.service import owner_changes

    first: list[float] = []
    deep: list[float] = []
    for _ in range(repeats):
        cursor, seen, last_id = None, set(), None
        for number in range(11):
            began = time.perf_counter()
            page = owner_changes(owner, kind=kind, limit=PAGE, cursor=cursor)
            spent = time.perf_counter() - began
            if number == 0:
                first.append(spent)
            elif number == 10:
                deep.append(spent)
            _check(page, owner, kind, seen, last_id)
            if page["items"]:
                last_id = _position(page["items"][-1])
            cursor = page["next_cursor"]
            if cursor is None:
                break
    return first, deep


def _position(item: dict) -> tuple:
    return (item["at"], item["execution_id"], item["ip"])


def _check(page: dict, owner: int, kind: str | None, seen: set, last: tuple | None) -> None:
    """A page's changes are of the kind asked for, none seen on an earlier page, newest
    first (by the time of their scan), and each newer page ends where the last began."""
    for item in page["items"]:
        key = (item["execution_id"], item["ip"], item["kind"])
        if key in seen:
            raise click.ClickException(f"owner {owner}: {key} on two pages")
        seen.add(key)
        if kind is not None and item["kind"] != kind:
            raise click.ClickException(f"owner {owner}: a {item['kind']} change in {kind}")
    times = [item["at"] for item in page["items"]]
    if times != sorted(times, reverse=True) or (last is not None and times and times[0] > last[0]):
        raise click.ClickException(f"owner {owner}: a page out of order")
