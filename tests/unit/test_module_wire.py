"""The frame codec: limits are checked before allocating (reading) or writing."""

from __future__ import annotations

import io

import pytest

from app.modules import wire
from app.modules.errors import ErrorKind, ModuleError, is_retryable


class CountingStream(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.requested: list[int] = []

    def read(self, size: int = -1) -> bytes:
        self.requested.append(size)
        return super().read(size)


def test_round_trip_and_clean_eof():
    frame = wire.encode_frame({"requestId": "a", "payload": {"x": "ü"}}, 1024)
    stream = io.BytesIO(frame + frame)
    assert wire.read_frame(stream, 1024)["payload"] == {"x": "ü"}
    assert wire.read_frame(stream, 1024)["requestId"] == "a"
    assert wire.read_frame(stream, 1024) is None


def test_announced_length_over_the_limit_is_refused_before_reading_the_body():
    stream = CountingStream(wire.HEADER.pack(2**31) + b"x" * 100)
    with pytest.raises(wire.FrameTooLarge):
        wire.read_frame(stream, 1_048_576)
    assert stream.requested == [wire.HEADER.size]  # nothing was allocated for the body


def test_oversized_message_is_refused_before_anything_is_written():
    with pytest.raises(wire.FrameTooLarge):
        wire.encode_frame({"payload": "x" * 5000}, 4096)


@pytest.mark.parametrize(
    "data",
    [
        wire.HEADER.pack(5) + b"{bad}",
        wire.HEADER.pack(2) + b"[]",
        wire.HEADER.pack(10) + b"{}",
        wire.HEADER.pack(0),
        b"\x00\x00",
    ],
)
def test_corrupt_frames_raise_frame_errors(data):
    with pytest.raises(wire.FrameError):
        wire.read_frame(io.BytesIO(data), 1024)


def test_error_kinds_and_retryability():
    for kind in ("Unavailable", "NotReady", "Busy", "DeadlineExceeded"):
        assert is_retryable(ModuleError(ErrorKind(kind), "c", "m"))
    assert not is_retryable(ModuleError(ErrorKind.EXECUTION, "template_error", "m"))
    assert not is_retryable(ValueError("not a module error"))
