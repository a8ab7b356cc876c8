"""Control frames: ``[op, req_id, body]`` requests and replies on the node's ROUTER.

The ops and their bodies are listed in :mod:`.frames`; this module checks only the
envelope (unknown ops are the caller's to refuse).
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import packb, unpack


def encode_control(op: int, req_id: int, body: dict[str, Any]) -> bytes:
    """Encode a control request or reply."""
    return packb([op, req_id, body])


def decode_control(frame: bytes) -> tuple[int, int, dict[str, Any]]:
    """Decode a control request or reply; unknown ops are the caller's to refuse."""
    value = unpack(frame)
    if type(value) is not list or len(value) != 3:
        raise ProtocolError("bad_shape", "control frame must be a 3-element array")
    op, req_id, body = value
    if type(op) is not int or type(req_id) is not int:
        raise ProtocolError("bad_type", "control op and request id must be integers")
    if type(body) is not dict:
        raise ProtocolError("bad_type", "control body must be a map")
    return op, req_id, body
