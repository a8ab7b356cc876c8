"""Gap notices: the GAP link frame and the delivery frame that tells subscribers a link
died upstream (layouts in :mod:`.frames`)."""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import packb, unpack
from .frames import GAP

__all__ = ["GAP_PATH_MAX", "check_gap", "decode_gap_notice", "encode_gap", "gap_notice"]

#: nodes a GAP frame may cross (a longer path is refused: it would loop or flood)
GAP_PATH_MAX = 64
_TEXT_MAX = 256
_FIELDS = ("node", "link", "peer", "reason")


def encode_gap(info: dict[str, Any]) -> bytes:
    return packb([GAP, info])


def check_gap(value: list[Any]) -> dict[str, Any]:
    """A GAP frame's map, type-checked (raises ProtocolError)."""
    if len(value) != 2 or type(value[1]) is not dict:
        raise ProtocolError("bad_shape", "GAP must be [27, map]")
    info: dict[str, Any] = value[1]
    for name in _FIELDS:
        text = info.get(name)
        if type(text) is not str or len(text) > _TEXT_MAX:
            raise ProtocolError("bad_type", f"GAP {name} must be a string")
    n, path = info.get("n"), info.get("path")
    if type(n) is not int or not 0 <= n < 1 << 63:
        raise ProtocolError("bad_type", "GAP n must be a non-negative integer")
    if (
        type(path) is not list
        or not 0 < len(path) <= GAP_PATH_MAX
        or not all(type(x) is str and len(x) <= _TEXT_MAX for x in path)
    ):
        raise ProtocolError("bad_type", f"GAP path must be 1..{GAP_PATH_MAX} strings")
    return info


def gap_notice(prefix: bytes, info: dict[str, Any], trailer: bytes) -> bytes:
    """The delivery frame of a notice: ``pattern NUL msgpack({gap: info}) trailer``."""
    body: bytes = packb({"gap": info})
    return prefix + body + trailer


def decode_gap_notice(frame: bytes) -> tuple[str, dict[str, Any]] | None:
    """(pattern, what the notice says) if ``frame`` is a gap notice, else None."""
    nul = frame.find(b"\0")
    if nul <= 0 or len(frame) < nul + 10:
        return None
    first = frame[nul + 1]
    if not (0x80 <= first <= 0x8F or first in (0xDE, 0xDF)):
        return None  # not a map: not a notice
    try:
        value = unpack(memoryview(frame)[nul + 1 : -8])
        pattern = frame[:nul].decode("utf-8")
    except (ValueError, UnicodeDecodeError, ProtocolError):
        return None
    gap = value.get("gap") if type(value) is dict else None
    if type(gap) is not dict:
        return None
    return pattern, {k: gap.get(k) for k in _FIELDS}
