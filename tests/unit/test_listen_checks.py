"""`netmap up` refuses an address it cannot listen on before it starts anything."""

from __future__ import annotations

import socket

import pytest

from app.local_stack import CannotListen, PortInUse, check_port_free


def test_a_port_in_use_is_refused_naming_it():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(PortInUse, match=f"127.0.0.1:{port} is already in use"):
            check_port_free("127.0.0.1", port)


@pytest.mark.parametrize(
    ("host", "says"),
    [
        ("999.1.1.1", "cannot listen on '999.1.1.1'"),  # a name that does not resolve
        ("192.0.2.77", "cannot listen on 192.0.2.77:"),  # an address of no interface here
    ],
)
def test_an_address_that_cannot_be_listened_on_is_a_one_line_error(host, says):
    # Both used to escape as a traceback (socket.gaierror, OSError).
    with pytest.raises(CannotListen) as caught:
        check_port_free(host, 8399)
    assert says in caught.value.message and "--host" in caught.value.message


def test_a_free_port_passes():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    check_port_free("127.0.0.1", port)
