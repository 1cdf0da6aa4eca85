"""`netmap up`: the whole product on one machine in one foreground command.

Order: data directory and generated secret → embedded PostgreSQL (unless a URL
is configured) → migrations → first admin user → gunicorn (web) and
``netmap runner`` as child processes → wait for /readyz → print the URL. On
SIGTERM/SIGINT the children get SIGTERM, are waited for (then killed if they
hang), and the embedded server is stopped if this command started it. The children
run in their own process group: a terminal's Ctrl-C reaches this command alone, so
each child gets exactly one signal (a second one would cut the runner's graceful
stop short and log a shutdown timeout that never happened).

On a terminal the output is a short banner (URL, first admin password, where logs
go, how to stop) and human-readable log lines; otherwise, or with
``--log-format json``, one JSON object a line. The configuration check is shown
once, here; the children log it at debug level only.

A runner that dies (even ``kill -9``) is restarted with a doubling backoff
(reset once it has run for a while), reported on stderr and as a
``RunnerRestarted`` event; the web server and the database stay up, since the
runner's work is leased and resumes where it stopped. The web server exiting
still ends the whole stack: without it there is nothing to serve; so does the
embedded PostgreSQL stopping.

One `netmap up` per data directory (a lock in ``run/``), and a port already in use is
refused before any URL is printed. Killed outright (``kill -9``), this command takes
its children along (the kernel signals them), and the next `netmap up` on the data
directory adopts the embedded PostgreSQL it left running.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import click

from app import embedded, migrations
from app.config import Settings
from app.migrations import PROJECT_ROOT
from app.observability import emit, log_format_in_use
from app.ops.config_check import STARTUP_CHECKED_ENV
from app.process_lock import LockHeld, hold_lock

READY_TIMEOUT_SECONDS = 90.0
# Bind addresses that mean "every interface": no address a reader's link could use.
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - compared against, never bound
ADMIN_USERNAME = "admin"
RUNNER_MAX_BACKOFF_SECONDS = 60.0
# A runner that stayed up this long counts as healthy again: the backoff starts over.
RUNNER_STABLE_SECONDS = 60.0


def die_with_this_process() -> None:
    """``preexec_fn`` of the web server and the runner: the kernel sends them SIGTERM when
    this command dies, even by ``kill -9`` (Linux's PR_SET_PDEATHSIG), so they stop
    gracefully instead of serving on as orphans that the next `netmap up` collides with.
    Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_PR_SET_PDEATHSIG = 1


class RunnerSupervisor:
    """Keeps one ``netmap runner`` child alive: restart with backoff after it dies."""

    def __init__(self, env: dict[str, str], base_backoff: float):
        self._env = env
        self._base_backoff = base_backoff
        self.restarts = 0
        self._consecutive = 0
        self._started_at = 0.0
        self._restart_at: float | None = None
        self.process = self._start()

    def _start(self) -> subprocess.Popen:
        self._started_at = time.monotonic()
        return subprocess.Popen(
            [sys.executable, "-m", "app", "runner"],
            cwd=PROJECT_ROOT,
            env=self._env,
            process_group=0,  # Ctrl-C reaches this command only: it stops the children once
            preexec_fn=die_with_this_process,  # this command runs no other thread
        )

    def check(self) -> None:
        """Called from the main loop: notice a dead runner, restart it when its backoff ends."""
        now = time.monotonic()
        if self._restart_at is not None:
            if now >= self._restart_at:
                self._restart_at = None
                self.restarts += 1
                self.process = self._start()
            return
        code = self.process.poll()
        if code is None:
            return
        if now - self._started_at >= RUNNER_STABLE_SECONDS:
            self._consecutive = 0
        backoff = min(RUNNER_MAX_BACKOFF_SECONDS, self._base_backoff * 2**self._consecutive)
        self._consecutive += 1
        self._restart_at = now + backoff
        click.echo(
            f"netmap: the runner (pid {self.process.pid}) exited with {code}; "
            f"restarting it in {backoff:g}s",
            err=True,
        )
        emit(
            "RunnerRestarted",
            level=logging.WARNING,
            pid=self.process.pid,
            exit_code=code,
            restarts=self.restarts + 1,
            backoff_seconds=backoff,
        )

    def children(self) -> list[subprocess.Popen]:
        return [self.process] if self._restart_at is None else []


def choose_log_format(chosen: str | None) -> str:
    """``--log-format``: fixed here for this process and, through the environment, its children."""
    from app.observability import set_log_format

    return set_log_format(chosen)


def _say(line: str = "") -> None:
    """A line of the banner on stdout; a closed pipe (``| head``) is not an error."""
    with contextlib.suppress(BrokenPipeError, OSError):
        click.echo(line)
        sys.stdout.flush()


def print_banner(
    base_url: str, admin_password: str | None, settings: Settings, *, runner: bool, text: bool
) -> None:
    """What a person needs after `netmap up`: where to go, how to sign in, where logs go, stop."""
    _say(f"netmap is up: {base_url}")
    if admin_password and admin_password == os.environ.get("NETMAP_ADMIN_PASSWORD"):
        # Chosen by whoever started it: not repeated into a log that may be kept.
        _say("first start: user 'admin' created with the password in NETMAP_ADMIN_PASSWORD")
    elif admin_password:
        _say(f"first start: user 'admin' created with password: {admin_password}")
        _say("  (shown only now: keep it, or change it under Account in the console)")
    if not text:
        _say(json.dumps({"url": base_url, "runner": runner}))
        return
    _say(f"  console:  {base_url}/  (sign in as admin)")
    _say(f"  API:      {base_url}/api/openapi.json  (reference: {base_url}/console/api)")
    _say(f"  logs:     this terminal (stderr); data and database in {settings.data_dir}")
    _say("  stop:     Ctrl-C (stops the web server, the runner and the database)")


def ensure_secret_key(settings: Settings) -> str:
    """The configured secret key, or one generated once and kept under data_dir."""
    if settings.security.secret_key:
        return settings.security.secret_key
    path = settings.data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(48)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key + "\n")
    return key


class AdminPasswordRejected(Exception):
    """``NETMAP_ADMIN_PASSWORD`` does not meet the password policy; says which rule."""


def ensure_first_admin(url: str) -> str | None:
    """Create user ``admin`` on first start; returns the password to print once."""
    import sqlalchemy as sa

    from app import db
    from app.identity.users import create_user_audited, password_problem_for

    chosen = os.environ.get("NETMAP_ADMIN_PASSWORD")
    if chosen:
        problem = password_problem_for(chosen, ADMIN_USERNAME)
        if problem:
            raise AdminPasswordRejected(
                f"NETMAP_ADMIN_PASSWORD does not meet the password policy ({problem}); "
                "set another, or unset it to have a password generated"
            )

    engine = db.create_engine(url, poolclass=sa.pool.NullPool, application_name="netmap-up")
    try:
        with db.transaction(engine=engine) as conn:
            # Serialise concurrent first starts; the lock ends with the transaction.
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(hashtext('netmap-first-admin'))"))
            if conn.execute(sa.text("SELECT 1 FROM users LIMIT 1")).scalar():
                return None
            password = os.environ.get("NETMAP_ADMIN_PASSWORD") or secrets.token_urlsafe(18)
            create_user_audited(
                conn, ADMIN_USERNAME, password, is_admin=True, actor_user_id=None, via="netmap up"
            )
            return password
    finally:
        engine.dispose()


# How often the main loop asks whether the embedded PostgreSQL still runs (a pid file
# read and a signal 0, not a connection).
DATABASE_CHECK_SECONDS = 2.0


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def _wait_ready(url: str, children: list[subprocess.Popen], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            return False
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


def _stop_children(children: list[subprocess.Popen], timeout: float) -> None:
    for child in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for child in children:
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)


def child_environment(settings: Settings, base_url: str, **values: str) -> dict[str, str]:
    """The web server's and runner's environment: this one's, with ``values``, the
    configuration file, and, unless configured, ``[alerts] public_url`` at this server
    (``base_url``), so links in alert messages open here. An address of every interface
    names no host a reader could open: links then stay paths."""
    env = dict(os.environ)
    # This command printed the configuration check: the children log it at debug only.
    env[STARTUP_CHECKED_ENV] = "1"
    env.update(values)
    if settings.config_path:
        env["NETMAP_CONFIG"] = settings.config_path
    host = settings.server.host
    if not settings.alerts.public_url and host not in _ANY_ADDRESS:
        env["NETMAP_ALERTS_PUBLIC_URL"] = base_url
    return env


class DataDirectoryInUse(click.ClickException):
    """Another ``netmap up`` serves this data directory."""


def hold_data_directory(data_dir) -> int:
    """Take ``run/up.lock`` in ``data_dir`` for this command's life (``process_lock``; the
    descriptor is returned and stays open). A second ``netmap up`` on the same directory
    would empty the first's metrics directory, remove its control socket and stop its
    database on exit."""
    run_dir = data_dir / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    try:
        return hold_lock(run_dir / "up.lock")
    except LockHeld as held:
        raise DataDirectoryInUse(
            f"another netmap up (pid {held.holder}) is using the data directory {data_dir}; "
            "stop it first, or give this one its own --data-dir"
        ) from None


class CannotListen(click.ClickException):
    """The web server's address cannot be listened on; exit 1 before anything starts."""


class PortInUse(CannotListen):
    """The address the web server should listen on is taken."""


def check_port_free(host: str, port: int) -> None:
    """Refuse an address netmap cannot listen on before printing any URL: a port something
    else listens on (gunicorn would retry it for seconds while the other server answered
    our readiness check), a host name that does not resolve, an address of no interface
    here."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as sock:
        # As gunicorn binds: a port left in TIME_WAIT by our last run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except socket.gaierror as exc:
            raise CannotListen(
                f"cannot listen on {host!r}: {exc.strerror}; give an address of this "
                "machine or a name that resolves to one (--host)"
            ) from None
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"{host}:{port} is already in use; stop what listens there, or choose "
                    "another port (--port)"
                ) from None
            raise CannotListen(
                f"cannot listen on {host}:{port}: {exc.strerror} (--host, --port)"
            ) from None


def run_local_stack(settings: Settings, *, with_runner: bool = True) -> int:
    data_dir = settings.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = hold_data_directory(data_dir)  # noqa: F841 - held open until this process ends
    if settings.server.port:
        check_port_free(settings.server.host, settings.server.port)
    secret_key = ensure_secret_key(settings)

    server = None
    shared_server = None
    url = settings.database.url
    if not url:
        # Stopped on exit, once no command that uses it at the same time still does
        # (``embedded.SharedServer``).
        shared_server = embedded.SharedServer(data_dir, stop_when_unused="always")
        server = shared_server.acquire()
        if not server.started_here:
            # This command holds the data directory (``hold_data_directory``): a server
            # running in it was left by a `netmap up` that was killed (kill -9, a crash)
            # or started by a command running now. It is adopted, and stopped on exit
            # by whichever of them is the last to use it.
            emit("EmbeddedPostgresAdopted", pgdata=str(server.pgdata))
        url = server.url

    stop_requested: list[int] = []

    def on_signal(signum: int, _frame) -> None:
        stop_requested.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    children: list[subprocess.Popen] = []
    runner: RunnerSupervisor | None = None
    exit_code = 0
    try:
        migrations.upgrade(url)
        try:
            admin_password = ensure_first_admin(url)
        except AdminPasswordRejected as exc:
            click.echo(f"netmap: {exc}", err=True)
            exit_code = 1
            return exit_code

        host = settings.server.host
        port = settings.server.port or _free_port(host)
        metrics_dir = data_dir / "run" / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(parents=True)
        bind = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        base_url = f"http://{bind}"
        env = child_environment(
            settings,
            base_url,
            NETMAP_DATABASE_URL=url,
            NETMAP_SECRET_KEY=secret_key,
            NETMAP_DATA_DIR=str(data_dir),
            NETMAP_BIND=bind,
            PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
        )
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "python:app.gunicorn_conf", "wsgi:app"],
            cwd=PROJECT_ROOT,
            env=env,
            process_group=0,  # see RunnerSupervisor._start
            preexec_fn=die_with_this_process,  # this command runs no other thread
        )
        children.append(web)
        if with_runner:
            runner = RunnerSupervisor(env, settings.runner.worker_restart_backoff_seconds)
        if not _wait_ready(base_url, [web], READY_TIMEOUT_SECONDS):
            if not stop_requested:
                click.echo("netmap: the web server did not become ready", err=True)
                exit_code = 1
        else:
            print_banner(
                base_url,
                admin_password,
                settings,
                runner=with_runner,
                text=log_format_in_use() == "text",
            )
            emit("NetmapUp", url=base_url, runner=with_runner)
            next_database_check = 0.0
            while not stop_requested:
                if web.poll() is not None:
                    click.echo(
                        f"netmap: the web server exited with {web.returncode}; shutting down",
                        err=True,
                    )
                    exit_code = 1
                    break
                if runner is not None:
                    runner.check()
                # Without its database the web answers 503 forever and nothing says
                # why: the stack stops, as it does when the web server exits, so that a
                # supervisor starts it again.
                if server is not None and time.monotonic() >= next_database_check:
                    next_database_check = time.monotonic() + DATABASE_CHECK_SECONDS
                    if not embedded.is_running(server.pgdata):
                        click.echo(
                            "netmap: the embedded PostgreSQL stopped; shutting down", err=True
                        )
                        exit_code = 1
                        break
                time.sleep(0.2)
    finally:
        if runner is not None:
            children.extend(runner.children())
        _stop_children(children, settings.runner.shutdown_timeout_seconds + 15)
        if shared_server is not None:
            shared_server.release()
        emit("NetmapDown", exit_code=exit_code)
    return exit_code
