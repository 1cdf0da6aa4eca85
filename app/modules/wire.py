"""The frame protocol between a host and a module worker process (MOD-5).

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8
JSON. The length is checked against the receiver's limit *before* any buffer
is allocated, and the sender checks the whole frame against the limit before
writing a byte, so an oversized request never reaches the pipe. Requests carry
``requestId``, ``rpcVersion``, ``releaseId``, ``method`` and ``payload``;
responses echo the first three and carry ``ok`` plus ``result`` or ``error``.

Standard library only: this file is packed into the worker as it is.
"""

from __future__ import annotations

import json
import struct
from typing import Any, BinaryIO

RPC_VERSION = 1
HEADER = struct.Struct(">I")
DEFAULT_MAX_FRAME_BYTES = 1_048_576


class FrameError(Exception):
    """The byte stream is not a valid frame (corrupt length, bad JSON, wrong shape)."""


class FrameTooLarge(FrameError):
    """A frame exceeds the agreed limit (detected before allocating or writing)."""


class PipeClosed(FrameError):
    """The other side closed the pipe (EOF in the middle of or before a frame)."""


def encode_frame(message: dict[str, Any], max_frame_bytes: int) -> bytes:
    body = json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    if len(body) > max_frame_bytes:
        raise FrameTooLarge(f"frame of {len(body)} bytes exceeds the {max_frame_bytes}-byte limit")
    return HEADER.pack(len(body)) + body


def decode_body(body: bytes) -> dict[str, Any]:
    try:
        message = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"frame is not UTF-8 JSON: {exc}") from None
    if not isinstance(message, dict):
        raise FrameError("frame is not a JSON object")
    return message


def check_length(length: int, max_frame_bytes: int) -> None:
    if length > max_frame_bytes:
        raise FrameTooLarge(f"announced frame of {length} bytes exceeds {max_frame_bytes}")
    if length == 0:
        raise FrameError("empty frame")


def read_exactly(stream: BinaryIO, size: int) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = stream.read(remaining)
        if not chunk:
            raise PipeClosed("pipe closed in the middle of a frame")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO, max_frame_bytes: int) -> dict[str, Any] | None:
    """Blocking read of one frame; None on a clean EOF between frames."""
    header = stream.read(HEADER.size)
    if not header:
        return None
    if len(header) < HEADER.size:
        header += read_exactly(stream, HEADER.size - len(header))
    (length,) = HEADER.unpack(header)
    check_length(length, max_frame_bytes)
    return decode_body(read_exactly(stream, length))


def response(
    request: dict[str, Any], release_id: str, *, result: Any = None, error: Any = None
) -> dict[str, Any]:
    message: dict[str, Any] = {
        "requestId": request.get("requestId"),
        "rpcVersion": RPC_VERSION,
        "releaseId": release_id,
        "ok": error is None,
    }
    if error is None:
        message["result"] = result
    else:
        message["error"] = error
    return message
