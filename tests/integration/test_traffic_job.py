"""The runner's traffic rollup job: registration, leases, 5-minute and day runs, cancellation."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from app import db
from app.db import transaction
from app.traffic.business_time import BusinessCalendar
from jobs.base import Cancelled, JobContext, claim_periodic
from jobs.registry import job_kinds
from jobs.traffic_rollup import DAY_JOB_NAME, JOB_NAME, LeaseKeeper, _run
from tests.support.nginx_logs import CST, LogDir, nginx_line
from tests.support.settings import make_settings

DOMAIN = "sc.example.com"


@pytest.fixture
def traffic_settings(database_url, tmp_path):
    settings = make_settings(
        database_url,
        tmp_path,
        traffic={
            "enabled": True,
            "domains": [DOMAIN],
            "log_dir": str(tmp_path / "nginx"),
            "source_server": "runner-1",
        },
    )
    engine = db.create_engine(settings.database.url, settings.database)
    db.set_engine(engine)
    yield settings
    db.set_engine(None)
    engine.dispose()


def _context(settings) -> JobContext:
    return JobContext(
        settings=settings, worker_id=1, stopping=threading.Event(), cancelled=threading.Event()
    )


def _query(sql: str):
    with transaction() as conn:
        return conn.execute(sa.text(sql)).all()


def _write_today_and_yesterday(tmp_path) -> LogDir:
    calendar = BusinessCalendar("+08:00")
    today = calendar.today(time.time())
    midnight = datetime.fromtimestamp(calendar.midnight(today), CST)
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    yesterday_lines = [nginx_line(midnight - timedelta(hours=3, seconds=i)) for i in range(4)]
    today_lines = [nginx_line(midnight + timedelta(minutes=1, seconds=i)) for i in range(6)]
    logs.write_lines(yesterday_lines + today_lines)
    return logs


def test_job_is_registered_only_when_enabled(traffic_settings, database_url, tmp_path):
    assert JOB_NAME in [kind.name for kind in job_kinds(traffic_settings)]
    disabled = make_settings(database_url, tmp_path)
    assert JOB_NAME not in [kind.name for kind in job_kinds(disabled)]


def test_job_runs_five_minute_and_day_rollups_once_under_leases(traffic_settings, tmp_path):
    _write_today_and_yesterday(tmp_path)
    (job,) = [kind for kind in job_kinds(traffic_settings) if kind.name == JOB_NAME]
    ctx = _context(traffic_settings)
    lease = job.claim(ctx)
    assert lease is not None
    # Another runner cannot take it while this one holds it.
    other = claim_periodic(
        JOB_NAME, interval_seconds=300, lease_seconds=300, holder="other-runner:1"
    )
    assert other is None
    job.run(ctx, lease)
    rows = _query(
        "SELECT granularity, business_date, sum(total_requests) AS n, bool_and(frozen) AS frozen, "
        "min(source_server) AS source FROM traffic_rollups GROUP BY 1, 2 ORDER BY 1, 2"
    )
    granularity_totals = [(r.granularity, r.n, r.frozen, r.source) for r in rows]
    # 5m rows for yesterday's late lines and today's; the day row only for yesterday (frozen).
    assert granularity_totals == [
        ("5m", 4, False, "runner-1"),
        ("5m", 6, False, "runner-1"),
        ("day", 4, True, "runner-1"),
    ]
    jobs = {
        r.name: r
        for r in _query(
            "SELECT name, runs, claim_token, last_error, next_run_at > now() AS later "
            "FROM runner_periodic_jobs"
        )
    }
    assert jobs[JOB_NAME].runs == 1 and jobs[JOB_NAME].claim_token is None
    assert jobs[DAY_JOB_NAME].runs == 1 and jobs[DAY_JOB_NAME].last_error is None
    assert jobs[DAY_JOB_NAME].later and jobs[JOB_NAME].later
    assert job.claim(ctx) is None  # not due again for interval_seconds


def test_lost_lease_abandons_the_run_before_it_commits(traffic_settings, tmp_path):
    _write_today_and_yesterday(tmp_path)
    lease = claim_periodic(JOB_NAME, interval_seconds=300, lease_seconds=300, holder="me:1")
    with transaction() as conn:  # another runner's view: the lease has expired and was taken
        conn.execute(
            sa.text(
                "UPDATE runner_periodic_jobs SET claim_token = gen_random_uuid() WHERE name = :n"
            ),
            {"n": JOB_NAME},
        )
    ctx = _context(traffic_settings)
    with pytest.raises(Cancelled, match="lease"):
        _run(ctx, LeaseKeeper(ctx, [lease], every_seconds=0), "5m")
    assert _query("SELECT count(*) AS n FROM traffic_files")[0].n == 0
    assert _query("SELECT count(*) AS n FROM traffic_rollups")[0].n == 0


def test_cancel_deadline_abandons_the_run(traffic_settings, tmp_path):
    _write_today_and_yesterday(tmp_path)
    lease = claim_periodic(JOB_NAME, interval_seconds=300, lease_seconds=300, holder="me:1")
    ctx = _context(traffic_settings)
    ctx.cancelled.set()
    with pytest.raises(Cancelled):
        _run(ctx, LeaseKeeper(ctx, [lease], every_seconds=60), "5m")
    assert _query("SELECT count(*) AS n FROM traffic_files")[0].n == 0


def test_an_unverified_yesterday_is_read_again_on_every_five_minute_run(traffic_settings, tmp_path):
    """TRF-5: while the log has not passed yesterday's end, every
    five-minute run reads the day again; once verified, the day period waits."""
    calendar = BusinessCalendar("+08:00")
    midnight = datetime.fromtimestamp(calendar.midnight(calendar.today(time.time())), CST)
    logs = LogDir(tmp_path / "nginx", DOMAIN)
    logs.write_lines([nginx_line(midnight - timedelta(hours=1, seconds=i)) for i in range(3)])
    (job,) = [kind for kind in job_kinds(traffic_settings) if kind.name == JOB_NAME]
    ctx = _context(traffic_settings)

    def day_job():
        return _query(
            "SELECT runs, next_run_at <= now() AS due, last_error FROM runner_periodic_jobs "
            f"WHERE name = '{DAY_JOB_NAME}'"
        )[0]

    def run_once():
        lease = job.claim(ctx)
        assert lease is not None
        job.run(ctx, lease)
        job._not_before = 0.0  # the next five-minute period has come
        with transaction() as conn:
            conn.execute(
                sa.text("UPDATE runner_periodic_jobs SET next_run_at = now() WHERE name = :n"),
                {"n": JOB_NAME},
            )

    run_once()
    assert day_job().runs == 1 and day_job().due  # unverified: due on the next run
    logs.append(nginx_line(midnight - timedelta(minutes=5)))  # a late line
    run_once()
    assert day_job().runs == 2 and day_job().due
    day = _query("SELECT sum(total_requests) AS n FROM traffic_rollups WHERE granularity = 'day'")
    assert day[0].n == 4  # the late line was read by the second day run
    assert _query("SELECT count(*) AS n FROM traffic_verified_days")[0].n == 0

    logs.append(nginx_line(midnight + timedelta(minutes=1)))  # the log passed its end
    run_once()
    state = day_job()
    assert state.runs == 3 and not state.due and state.last_error is None
    assert _query("SELECT count(*) AS n FROM traffic_verified_days")[0].n == 1
