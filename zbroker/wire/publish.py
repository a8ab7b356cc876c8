"""Client publish frames: one publish, a publish batch, a batch of publish runs, and
their checks.

A client PUSHes them to the node's PULL socket (``PORT+1``); see :mod:`.frames` for the
layout. :func:`check_publishes` is the one place the rules of a publish frame live: it
checks a whole batch in one call, as the node's hot path needs; :func:`decode_publish` is
its one-frame form. :func:`check_publish_runs` checks a batch of runs (a client of protocol
3 sends them: one topic per run, one decoding per frame) against the same rules, in place;
:func:`runs_of_publishes` makes runs of checked publish frames, so the node takes every
form through one path.
"""

from __future__ import annotations

from typing import Any

import msgpack

from ..const import TOPIC_CACHE_SIZE
from ..errors import InvalidTopic, ProtocolError
from ..topics import validate_publish_topic
from .codec import TRAILING, packb
from .frames import FMTS, Errors

#: msgpack's bin and array headers: an array whose first element is one is a publish
#: batch or a batch of runs, not a publish frame (whose first element is its topic)
_NOT_TOPIC = frozenset((0xC4, 0xC5, 0xC6, 0xDC, 0xDD, *range(0x90, 0xA0)))
_UNPACK_ERRORS = (ValueError, msgpack.UnpackException, TypeError)


def encode_publish(topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None) -> bytes:
    """Encode a client publish frame (inputs already validated by the client)."""
    return packb([topic, payload, fmt, headers])


def encode_publish_batch(frames: list[bytes]) -> bytes:
    """Encode a publish batch from publish frames (each from :func:`encode_publish`)."""
    return packb(frames)


def encode_publish_runs(runs: list[list[Any]]) -> bytes:
    """Encode a batch of publish runs, ``[[topic, [[payload, fmt, headers], ...]], ...]``
    (inputs already validated by the client)."""
    return packb(runs)


def publish_batch_elements(frame: bytes) -> list[Any] | None:
    """The elements of a publish batch (each should be a publish frame, ``bytes``), or
    None if ``frame`` is not a batch (then :func:`decode_publish` judges it)."""
    errors: Errors = []
    elements = publish_elements(frame, errors)
    if errors:
        raise ProtocolError(*errors[0])
    return None if len(elements) == 1 and elements[0] is frame else list(elements)


def decode_publish(frame: bytes) -> tuple[str, bytes, int, dict[str, Any] | None]:
    """Decode and type-check one publish frame. Topic rules are checked by the caller."""
    errors: Errors = []
    (value,) = check_publishes((frame,), errors, None)
    if value is None:
        raise ProtocolError(*errors[0])
    topic, payload, fmt, headers = value
    return topic, payload, fmt, headers


def publish_elements(raw: bytes, errors: Errors) -> list[Any] | tuple[bytes, ...]:
    """The publish frames in ``raw``: itself (a fixarray of 4 whose first element is not
    a bin or an array: our client's single form, not decoded here), or a batch's elements
    (publish frames, ``bytes``; or runs, ``list``: see :func:`check_publish_runs`)."""
    try:
        single = raw[0] == 0x94 and raw[1] not in _NOT_TOPIC
    except IndexError:
        single = True
    if single:
        return (raw,)
    try:
        outer = msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except _UNPACK_ERRORS as exc:
        errors.append(("not_msgpack", str(exc)))
        return ()
    if type(outer) is list and outer and (type(outer[0]) is bytes or type(outer[0]) is list):
        return outer  # a publish batch, [publish frame: bin, ...], or a batch of runs
    return (raw,)


def check_publishes(
    elements: list[Any] | tuple[bytes, ...], errors: Errors, valid: set[str] | None
) -> list[list[Any] | None]:
    """Decode publish frames: per element its ``[topic, payload, fmt, headers]``, or None
    (the reason in ``errors``). ``valid``: topics already checked (their rules are checked
    here and added); None: topic rules are the caller's."""
    unpackb = msgpack.unpackb
    values: list[list[Any] | None] = []
    for frame in elements:
        try:
            if type(frame) is not bytes:
                raise ProtocolError("bad_shape", "publish batch element must be bin")
            try:
                value = unpackb(frame, raw=False, strict_map_key=False)
            except msgpack.ExtraData:
                raise ProtocolError("not_msgpack", TRAILING) from None
            except _UNPACK_ERRORS as exc:
                raise ProtocolError("not_msgpack", str(exc)) from None
            if type(value) is not list or len(value) != 4:
                raise ProtocolError("bad_shape", "publish frame must be a 4-element array")
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
                raise ProtocolError("bad_type", _type_detail(value))
            if valid is not None and topic not in valid:
                try:
                    validate_publish_topic(topic)
                except InvalidTopic as exc:
                    raise ProtocolError("bad_topic", str(exc)) from None
                if len(valid) >= TOPIC_CACHE_SIZE:
                    valid.clear()
                valid.add(topic)
        except ProtocolError as exc:
            errors.append((exc.reason, exc.detail))
            values.append(None)
            continue
        values.append(value)
    return values


def check_publish_runs(runs: list[Any], errors: Errors, valid: set[str]) -> int:
    """Check a batch of publish runs in place: a run that is not ``[topic, [entry, ...]]``
    (one entry at least) with a publishable topic becomes None, an entry that is not
    ``[payload, fmt, headers]`` (the types as in a publish frame) is taken out of its run;
    the reasons go to ``errors``. ``valid``: topics already checked (new ones are added).
    Returns the entries the runs held, good and bad, and one for each malformed run (what
    the frame counts for in a drain: a frame of empty runs, each a topic to check, would
    otherwise cost its sender one message of the budget however many it held)."""
    held = 0
    for i in range(len(runs)):
        run = runs[i]
        if type(run) is not list or len(run) != 2 or type(run[1]) is not list or not run[1]:
            errors.append(("bad_shape", "a publish run must be [topic, [entry, ...]]"))
            runs[i] = None
            held += 1
            continue
        topic, entries = run
        held += len(entries)
        if type(topic) is not str:
            reason, detail = "bad_type", "topic must be a string"
        elif topic in valid:
            reason = ""
        else:
            try:
                validate_publish_topic(topic)
                reason = ""
            except InvalidTopic as exc:
                reason, detail = "bad_topic", str(exc)
            if not reason:
                if len(valid) >= TOPIC_CACHE_SIZE:
                    valid.clear()
                valid.add(topic)
        if reason:
            errors.extend([(reason, detail)] * len(entries))
            runs[i] = None
            continue
        for e in entries:  # (_entry_ok inline: a call per message costs as much again)
            if (
                type(e) is not list
                or len(e) != 3
                or type(e[0]) is not bytes
                or type(e[1]) is not int
                or (e[1] != 0 and e[1] != 1)
                or (e[2] is not None and not _entry_ok(e))
            ):
                run[1] = _good_entries(entries, errors)
                break
    return held


def _entry_ok(e: Any) -> bool:
    """Whether ``e`` is a publish run's entry ``[payload, fmt, headers]``."""
    if type(e) is not list or len(e) != 3:
        return False
    payload, fmt, headers = e
    return (
        type(payload) is bytes
        and type(fmt) is int
        and (fmt == 0 or fmt == 1)
        and (headers is None or (type(headers) is dict and all(type(k) is str for k in headers)))
    )


def _good_entries(entries: list[Any], errors: Errors) -> list[Any]:
    """The entries of a run that are well formed (a bad one's reason to ``errors``)."""
    good = []
    for e in entries:
        if _entry_ok(e):
            good.append(e)
        elif type(e) is not list or len(e) != 3:
            errors.append(("bad_shape", "a publish run's entry must be [payload, fmt, headers]"))
        else:
            errors.append(("bad_type", _type_detail(["", *e])))
    return good


def runs_of_publishes(values: list[list[Any] | None]) -> list[list[Any]]:
    """Checked publish frames (:func:`check_publishes`; None for a bad one) as runs:
    consecutive publishes on one topic make one ``[topic, [[payload, fmt, headers],
    ...]]``. Each value becomes its entry in place (its topic taken off)."""
    runs: list[list[Any]] = []
    topic = None
    entries: list[Any] = []
    for value in values:
        if value is None:
            continue
        if value[0] != topic or not runs:
            topic = value[0]
            entries = []
            runs.append([topic, entries])
        del value[0]
        entries.append(value)
    return runs


def _type_detail(value: list[Any]) -> str:
    """What is wrong with a publish frame's fields (only for one that is wrong)."""
    topic, payload, fmt = value[:3]
    if type(topic) is not str:
        return "topic must be a string"
    if type(payload) is not bytes:
        return "payload must be bytes"
    if fmt not in FMTS or type(fmt) is not int:
        return f"unknown payload format {fmt!r}"
    return "headers must be a map with string keys"
