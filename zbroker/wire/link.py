"""Link frames between nodes: the ``[type, ...]`` envelope, the map frames (LINK_HELLO,
LINK_WELCOME, LINK_REFUSE, BYE), HEARTBEAT, ADVERT and MSGS.

Layouts are in :mod:`.frames`. A receiver decodes the envelope once with
:func:`decode_frame` and hands the array to the check of its type; the persistent frames
(PMSGS, PACK) are in :mod:`.forward`.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import packb, str_list, unpack
from .frames import FMTS


def encode_link(*parts: Any) -> bytes:
    """Encode a link frame ``[type, ...]``."""
    return packb(list(parts))  # type: ignore[no-any-return]


def decode_frame(frame: bytes) -> list[Any]:
    """Decode any ROUTER/DEALER body into its array; the first element is an int type."""
    value = unpack(frame)
    if type(value) is not list or not value or type(value[0]) is not int:
        raise ProtocolError("bad_shape", "frame must be an array starting with its type")
    return value


def check_link_map(value: list[Any], size: int = 2) -> dict[str, Any]:
    """``[type, {map}]`` frames (HELLO, WELCOME, REFUSE, BYE): return the map."""
    if len(value) != size or type(value[1]) is not dict:
        raise ProtocolError("bad_shape", "link frame must be [type, map]")
    result: dict[str, Any] = value[1]
    return result


def decode_advert(
    value: list[Any],
) -> tuple[bool, tuple[tuple[str, str, tuple[str, ...] | None], ...]]:
    """Check an ADVERT frame's array; return (full, entries). Patterns are checked by the
    caller (the node validates them with :mod:`zbroker.topics`)."""
    full, entries, _ = decode_advert_sticky(value)
    return full, entries


def decode_advert_sticky(
    value: list[Any],
) -> tuple[bool, tuple[tuple[str, str, tuple[str, ...] | None], ...], frozenset[tuple[str, str]]]:
    """Like :func:`decode_advert`, plus the keys ``(pattern, origin)`` flagged sticky."""
    if len(value) != 3 or type(value[1]) is not bool or type(value[2]) is not list:
        raise ProtocolError("bad_shape", "ADVERT must be [20, full, entries]")
    entries = []
    sticky = set()
    for e in value[2]:
        if (
            type(e) is not list
            or not 3 <= len(e) <= 4
            or type(e[0]) is not str
            or type(e[1]) is not str
        ):
            raise ProtocolError("bad_type", "ADVERT entry must be [pattern, origin, path]")
        path = None if e[2] is None else str_list(e[2], "ADVERT path")
        if len(e) == 4:
            if type(e[3]) is not bool:
                raise ProtocolError("bad_type", "ADVERT sticky flag must be a boolean")
            if e[3] and path is not None:
                sticky.add((e[0], e[1]))
        entries.append((e[0], e[1], path))
    return value[1], tuple(entries), frozenset(sticky)


def check_link_msg(m: Any) -> None:
    """Type-check one message of a MSGS batch (raises ProtocolError)."""
    if type(m) is not list or len(m) != 10:
        raise ProtocolError("bad_shape", "MSGS entry must be a 10-element array")
    topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
    if (
        type(topic) is not str
        or type(payload) is not bytes
        or type(fmt) is not int
        or fmt not in FMTS
        or (headers is not None and type(headers) is not dict)
        or type(origin) is not str
        or type(inc) is not int
        or type(seq) is not int
        or type(ts) not in (float, int)
        or type(path) is not list
        or (targets is not None and type(targets) is not list)
    ):
        raise ProtocolError("bad_type", "MSGS entry has wrong field types")
