"""Queue group link frames: QMSGS (messages each meant for one member node of a group)
and QCAP (the capacity behind each group key, flooded). Layouts are in :mod:`.frames`.

A QMSGS entry is a MSGS entry (:func:`~.link.check_link_msg`) whose last field, where
MSGS has its targets, is ``[target broker ID, group key]``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ProtocolError
from .codec import packb
from .frames import QCAP, QMSGS, Errors
from .link import check_msgs

#: (group key, origin, stamp, members, free credit)
CapEntry = tuple[str, str, int, int, int]


def encode_qmsgs(entries: list[list[Any]]) -> bytes:
    """A QMSGS frame from entries ``[topic, ..., ts, path, [target, group key]]``."""
    out: bytes = packb([QMSGS, entries])
    return out


def decode_qmsgs(value: list[Any]) -> list[Any]:
    """The entries of a QMSGS frame (checked with :func:`check_qmsgs`)."""
    if len(value) != 2 or type(value[1]) is not list:
        raise ProtocolError("bad_shape", "QMSGS must be [34, entries]")
    return value[1]


def check_qmsgs(
    batch: list[Any], caches: tuple[set[Any], set[Any], set[str]], errors: Errors
) -> None:
    """Type-check a QMSGS frame's entries in place, the whole batch at once (as
    :func:`~.link.check_msgs`, whose caches it shares the shape of): a good entry gets its
    path and ``(target, group key)`` as tuples, a bad one becomes None (reason in
    ``errors``)."""
    check_msgs(batch, caches, errors)
    for i, m in enumerate(batch):
        if m is not None and (m[9] is None or len(m[9]) != 2):
            errors.append(("bad_type", "QMSGS entry must end with [target, group key]"))
            batch[i] = None


def encode_qcap(entries: list[CapEntry]) -> bytes:
    out: bytes = packb([QCAP, [list(e) for e in entries]])
    return out


def decode_qcap(value: list[Any]) -> list[CapEntry]:
    """The entries of a QCAP frame; a malformed frame raises ProtocolError (whole)."""
    if len(value) != 2 or type(value[1]) is not list:
        raise ProtocolError("bad_shape", "QCAP must be [35, entries]")
    out: list[CapEntry] = []
    for e in value[1]:
        if (
            type(e) is not list
            or len(e) != 5
            or type(e[0]) is not str
            or type(e[1]) is not str
            or not all(type(x) is int and 0 <= x < 1 << 63 for x in e[2:])
        ):
            raise ProtocolError("bad_type", "QCAP entry must be [key, origin, stamp, n, free]")
        out.append((e[0], e[1], e[2], e[3], e[4]))
    return out
