"""Batch decoders of the two hot frame families (client publishes, link MSGS).

They check a whole batch in one call (no call per message, no second pass: what the
pipeline needs is left in place), with the reason for each element that did not pass.
This is the one place these rules live.
"""

from __future__ import annotations

from typing import Any

import msgpack

from ..const import TOPIC_CACHE_SIZE
from ..errors import InvalidTopic
from ..topics import validate_publish_topic, validate_topic

__all__ = ["check_msgs", "check_publishes", "publish_elements"]

#: msgpack's bin headers: an array whose first element is one is a publish batch
_BIN_TYPES = frozenset((0xC4, 0xC5, 0xC6))
_UNPACK_ERRORS = (ValueError, msgpack.UnpackException, TypeError)
#: bounds of numbers that reach SQLite (INTEGER is signed 64-bit; ts must be finite)
I64 = 1 << 63
TS_MAX = 1e15
#: entries in the caches of checked paths and targets (a stream is a distinct one)
STREAM_CACHE_SIZE = 4096

Errors = list[tuple[str, str]]


def publish_elements(raw: bytes, errors: Errors) -> list[Any] | tuple[bytes, ...]:
    """The publish frames in ``raw``: itself (a fixarray of 4 whose first element is not
    a bin: our client's single form, not decoded here), or a batch's elements."""
    try:
        single = raw[0] == 0x94 and raw[1] not in _BIN_TYPES
    except IndexError:
        single = True
    if single:
        return (raw,)
    try:
        outer = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except _UNPACK_ERRORS as exc:
        errors.append(("not_msgpack", str(exc)))
        return ()
    if type(outer) is list and outer and type(outer[0]) is bytes:
        return outer  # a publish batch: [publish frame: bin, ...]
    return (raw,)


def check_publishes(
    elements: list[Any] | tuple[bytes, ...], errors: Errors, valid: set[str]
) -> list[list[Any] | None]:
    """Decode publish frames: per element its ``[topic, payload, fmt, headers]``, or None
    (the reason in ``errors``). ``valid``: topics already checked."""
    unpackb = msgpack.unpackb
    values: list[list[Any] | None] = []
    for frame in elements:
        try:
            if type(frame) is not bytes:
                raise _Bad("bad_shape", "publish batch element must be bin")
            try:
                value = unpackb(frame, raw=False, strict_map_key=False)
            except _UNPACK_ERRORS as exc:
                raise _Bad("not_msgpack", str(exc)) from None
            if type(value) is not list or len(value) != 4:
                raise _Bad("bad_shape", "publish frame must be a 4-element array")
            topic, payload, fmt, headers = value
            if (
                type(topic) is not str
                or type(payload) is not bytes
                or (fmt != 0 and fmt != 1)
                or type(fmt) is not int
                or (
                    headers is not None
                    and (type(headers) is not dict or not all(type(k) is str for k in headers))
                )
            ):
                raise _Bad("bad_type", "publish frame has wrong field types")
            if topic not in valid:
                try:
                    validate_publish_topic(topic)
                except InvalidTopic as exc:
                    raise _Bad("bad_topic", str(exc)) from None
                if len(valid) >= TOPIC_CACHE_SIZE:
                    valid.clear()
                valid.add(topic)
        except _Bad as exc:
            errors.append((exc.reason, exc.detail))
            values.append(None)
            continue
        values.append(value)
    return values


def check_msgs(
    batch: list[Any],
    caches: tuple[set[tuple[Any, ...]], set[tuple[Any, ...]], set[str]],
    errors: Errors,
) -> None:
    """Type-check a MSGS frame's messages in place: a good one gets its path and targets
    as tuples (what routing keys on), a bad one is replaced by None (the reason in
    ``errors``). ``caches``: paths and targets already checked, topics already valid."""
    paths_ok, targets_ok, valid = caches
    for i, m in enumerate(batch):
        try:
            if type(m) is not list or len(m) != 10:
                raise _Bad("bad_shape", "MSGS entry must be a 10-element array")
            topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
            if (
                type(topic) is not str
                or type(payload) is not bytes
                or type(fmt) is not int
                or (fmt != 0 and fmt != 1)
                or (headers is not None and type(headers) is not dict)
                or type(origin) is not str
                or type(inc) is not int
                or type(seq) is not int
                or type(ts) not in (float, int)
                or type(path) is not list
                or (targets is not None and type(targets) is not list)
            ):
                raise _Bad("bad_type", "MSGS entry has wrong field types")
            key_path = tuple(path)  # (unhashable elements: TypeError, bad_type)
            if key_path not in paths_ok:
                _strings(key_path, paths_ok)
            if targets is not None:
                targets = tuple(targets)
                if targets not in targets_ok:
                    _strings(targets, targets_ok)
            if not (0 <= inc < I64 and 0 <= seq < I64 and -TS_MAX < ts < TS_MAX):
                # out of what the store can hold (and NaN fails every comparison)
                raise _Bad("bad_value", "MSGS entry has out-of-range numbers")
            if topic not in valid:
                validate_topic(topic)
                if len(valid) >= TOPIC_CACHE_SIZE:
                    valid.clear()
                valid.add(topic)
        except _Bad as exc:
            errors.append((exc.reason, exc.detail))
        except InvalidTopic as exc:
            errors.append(("bad_topic", str(exc)))
        except TypeError as exc:  # unhashable path/targets elements
            errors.append(("bad_type", str(exc)))
        else:
            m[8] = key_path
            m[9] = targets
            continue
        batch[i] = None


def _strings(items: tuple[Any, ...], checked: set[tuple[Any, ...]]) -> None:
    if not all(type(p) is str for p in items):
        raise _Bad("bad_type", "MSGS path and targets must be strings")
    if len(checked) >= STREAM_CACHE_SIZE:
        checked.clear()
    checked.add(items)


class _Bad(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
