"""Which request bodies the web worker reads on its event loop (app.gunicorn_worker)."""

from __future__ import annotations

import pytest

from app.gunicorn_worker import buffered_body_length

HEAD = b"POST /x HTTP/1.1\r\nHost: h\r\n%s\r\n"


@pytest.mark.parametrize(
    "headers, expected",
    [
        (b"Content-Length: 10\r\n", 10),
        (b"content-length:10\r\n", 10),
        (b"Content-Length: 0\r\n", None),
        (b"", None),
        (b"Content-Length: 100\r\n", None),  # over the limit: a thread reads it
        (b"Content-Length: 10\r\nContent-Length: 10\r\n", None),  # the parser refuses it
        (b"Transfer-Encoding: chunked\r\n", None),
        (b"Content-Length: 10\r\nExpect: 100-continue\r\n", None),
        (b"Content-Length: -1\r\n", None),
        (b"Content-Length: 1x\r\n", None),
    ],
)
def test_buffered_body_length(headers, expected):
    assert buffered_body_length(HEAD % headers, 50) == expected


def test_buffering_can_be_turned_off():
    assert buffered_body_length(HEAD % b"Content-Length: 10\r\n", 0) is None
