"""Processes using one data directory's embedded server share it (``SharedServer``).

Two commands run at once used to collide: the one that had started the server stopped
it under the other. Each ``SharedServer`` here stands for one process (flock locks
belong to open files, so two in one process conflict as two processes would)."""

from __future__ import annotations

import shutil

import pytest

from app import embedded
from tests.support.web_server import short_directory

pytestmark = pytest.mark.e2e


@pytest.fixture
def data_dir():
    directory = short_directory("nm-share-")
    yield directory
    if embedded.is_running(directory / "pgdata"):
        leftover = embedded.SharedServer(directory, stop_when_unused="always")
        leftover.acquire()
        leftover.release()
    shutil.rmtree(directory, ignore_errors=True)


def test_the_command_that_started_the_server_leaves_it_to_one_still_using_it(data_dir):
    first = embedded.SharedServer(data_dir, stop_when_unused="if_started")
    assert first.acquire().started_here
    second = embedded.SharedServer(data_dir, stop_when_unused="if_started")
    assert not second.acquire().started_here
    first.release()  # used to stop the server under the second command
    assert embedded.is_running(data_dir / "pgdata")
    second.release()  # the last user: the first one asked for a stop
    assert not embedded.is_running(data_dir / "pgdata")


def test_a_command_beside_netmap_up_never_stops_its_server_and_up_leaves_it_to_the_command(
    data_dir,
):
    up = embedded.SharedServer(data_dir, stop_when_unused="always")
    up.acquire()
    command = embedded.SharedServer(data_dir, stop_when_unused="if_started")
    assert not command.acquire().started_here
    command.release()
    assert embedded.is_running(data_dir / "pgdata")
    again = embedded.SharedServer(data_dir, stop_when_unused="if_started")
    again.acquire()
    up.release()  # a command still uses it
    assert embedded.is_running(data_dir / "pgdata")
    again.release()
    assert not embedded.is_running(data_dir / "pgdata")


def test_a_server_started_to_be_kept_is_left_running(data_dir):
    kept = embedded.SharedServer(data_dir, stop_when_unused="never")
    assert kept.acquire().started_here
    kept.release()
    assert embedded.is_running(data_dir / "pgdata")
    command = embedded.SharedServer(data_dir, stop_when_unused="if_started")
    command.acquire()
    command.release()
    assert embedded.is_running(data_dir / "pgdata")
