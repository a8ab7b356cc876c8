"""Link frames between nodes: the ``[type, ...]`` envelope, the map frames (LINK_HELLO,
LINK_WELCOME, LINK_REFUSE, BYE), HEARTBEAT, ADVERT and MSGS.

Layouts are in :mod:`.frames`. A receiver decodes the envelope once with
:func:`decode_frame` and hands the array to the check of its type; the persistent frames
(PMSGS, PACK) are in :mod:`.forward`.
"""

from __future__ import annotations

from typing import Any

from ..const import TOPIC_CACHE_SIZE
from ..errors import InvalidTopic, ProtocolError, SelectorError
from ..selectors import canonical
from ..topics import validate_topic
from .codec import packb, str_list, unpack
from .frames import I64, TS_MAX, Errors
from .splice import ONE_RUN, SPLICE_MIN_BYTES, keep_run_bytes

#: entries in the caches of checked paths and targets (a stream is a distinct one)
STREAM_CACHE_SIZE = 4096


def encode_link(*parts: Any) -> bytes:
    """Encode a link frame ``[type, ...]``."""
    return packb(list(parts))


def decode_frame(frame: bytes | memoryview) -> list[Any]:
    """Decode any ROUTER/DEALER body (bytes, or a view of the message libzmq received)
    into its array; the first element is an int type. A large MSGR frame of one run keeps
    its entries' bytes (:mod:`.splice`)."""
    value = unpack(frame)
    if type(value) is not list or not value or type(value[0]) is not int:
        raise ProtocolError("bad_shape", "frame must be an array starting with its type")
    if len(frame) >= SPLICE_MIN_BYTES and frame[: len(ONE_RUN)] == ONE_RUN:
        keep_run_bytes(value, frame)
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
    full, entries, sticky, _ = decode_advert_entries(value)
    return full, entries, sticky


Keys = frozenset[tuple[str, str]]


def decode_advert_entries(value: list[Any]) -> tuple[
    bool,
    tuple[tuple[str, str, tuple[str, ...] | None], ...],
    Keys,
    dict[tuple[str, str], frozenset[str]],
]:  # fmt: skip
    """Like :func:`decode_advert_sticky`, plus the selectors of the keys that carry them
    (canonical; an entry whose selectors do not compile here is taken without them)."""
    full, entries, sticky, selectors, _ = decode_advert_held(value)
    return full, entries, sticky, selectors


def decode_advert_held(value: list[Any]) -> tuple[
    bool,
    tuple[tuple[str, str, tuple[str, ...] | None], ...],
    Keys,
    dict[tuple[str, str], frozenset[str]],
    Keys,
]:  # fmt: skip
    """Like :func:`decode_advert_entries`, plus the sticky keys flagged held on a ghost
    of a down link. An entry is ``[pattern, origin, path, sticky?, selectors or nil?,
    held?]``."""
    if len(value) != 3 or type(value[1]) is not bool or type(value[2]) is not list:
        raise ProtocolError("bad_shape", "ADVERT must be [20, full, entries]")
    entries = []
    sticky, held = set(), set()
    selectors: dict[tuple[str, str], frozenset[str]] = {}
    for e in value[2]:
        if (
            type(e) is not list
            or not 3 <= len(e) <= 6
            or type(e[0]) is not str
            or type(e[1]) is not str
        ):
            raise ProtocolError("bad_type", "ADVERT entry must be [pattern, origin, path]")
        path = None if e[2] is None else str_list(e[2], "ADVERT path")
        if len(e) >= 4:
            if type(e[3]) is not bool:
                raise ProtocolError("bad_type", "ADVERT sticky flag must be a boolean")
            if e[3] and path is not None:
                sticky.add((e[0], e[1]))
        if len(e) >= 5 and path is not None and e[4] is not None:
            texts = _selectors(e[4])
            if texts is not None:
                selectors[(e[0], e[1])] = texts
        if len(e) == 6:
            if type(e[5]) is not bool:
                raise ProtocolError("bad_type", "ADVERT held flag must be a boolean")
            if e[5] and e[3] and path is not None:
                held.add((e[0], e[1]))
        entries.append((e[0], e[1], path))
    return value[1], tuple(entries), frozenset(sticky), selectors, frozenset(held)


def _selectors(value: Any) -> frozenset[str] | None:
    """An ADVERT entry's selectors: a non-empty list of selector texts, canonical; None
    if one does not compile here. Such an entry is taken without selectors: it only
    widens what its origin is sent (the origin's own delivery still applies them), where
    refusing the frame would lose every other entry it carries, for good (what a node
    advertised is not said again). A valid selector's canonical text, which nodes
    advertise, may be longer than a selector the parser takes (it adds parentheses)."""
    texts = str_list(value, "ADVERT selectors")
    if not texts:
        raise ProtocolError("bad_advert", "ADVERT selectors must not be empty")
    try:
        return frozenset(canonical(t) for t in texts)
    except SelectorError:
        return None


def check_link_msg(m: Any, topics: set[str] | None = None) -> None:
    """Type-check one message of a MSGS batch (raises ProtocolError): the one-message form
    of :func:`check_msgs`. ``topics``: topics already valid (checked and added); None:
    topic rules are the caller's."""
    errors: Errors = []
    check_msgs([list(m) if type(m) is list else m], (set(), set(), topics), errors)
    if errors:
        raise ProtocolError(*errors[0])


def check_msgs(
    batch: list[Any],
    caches: tuple[set[tuple[Any, ...]], set[tuple[Any, ...]], set[str] | None],
    errors: Errors,
) -> None:
    """Type-check a MSGS frame's messages in place: a good one gets its path and targets
    as tuples (what routing keys on), a bad one is replaced by None (the reason in
    ``errors``). ``caches``: paths and targets already checked, topics already valid (None: topic
    rules are the caller's)."""
    paths_ok, targets_ok, valid = caches
    last_path = path_t = last_targets = targets_t = None  # the last ones, and checked
    # builtins and limits as locals: this loop runs once per message on every relay
    _str, _bytes, _int, _float, _list, _dict = str, bytes, int, float, list, dict
    i64, ts_max = I64, TS_MAX
    for i, m in enumerate(batch):
        try:
            if type(m) is not _list or len(m) != 10:
                raise ProtocolError("bad_shape", "MSGS entry must be a 10-element array")
            topic, payload, fmt, headers, origin, inc, seq, ts, path, targets = m
            if (
                type(topic) is not _str
                or type(payload) is not _bytes
                or type(fmt) is not _int
                or (fmt != 0 and fmt != 1)
                or (headers is not None and type(headers) is not _dict)
                or type(origin) is not _str
                or type(inc) is not _int
                or type(seq) is not _int
                or (type(ts) is not _float and type(ts) is not _int)
                or type(path) is not _list
                or (targets is not None and type(targets) is not _list)
            ):
                raise ProtocolError("bad_type", "MSGS entry has wrong field types")
            # in a run (the same path or targets as the last message's) the checked
            # tuple is shared: no tuple, no hashing per message
            if path != last_path:  # (unhashable elements: TypeError, bad_type)
                path_t = _checked(tuple(path), paths_ok)
                last_path = path
            if targets is not None and targets != last_targets:
                targets_t = _checked(tuple(targets), targets_ok)
                last_targets = targets
            if not (0 <= inc < i64 and 0 <= seq < i64 and -ts_max < ts < ts_max):
                # out of what the store can hold (and NaN fails every comparison)
                raise ProtocolError("bad_value", "MSGS entry has out-of-range numbers")
            if valid is not None and topic not in valid:
                _valid_topic(topic, valid)
        except ProtocolError as exc:
            errors.append((exc.reason, exc.detail))
        except InvalidTopic as exc:
            errors.append(("bad_topic", str(exc)))
        except TypeError as exc:  # unhashable path/targets elements
            errors.append(("bad_type", str(exc)))
        else:
            m[8] = path_t
            m[9] = None if targets is None else targets_t
            continue
        batch[i] = None


def _valid_topic(topic: str, valid: set[str]) -> None:
    """Check a topic not seen yet (raises InvalidTopic) and remember it as valid."""
    validate_topic(topic)
    if len(valid) >= TOPIC_CACHE_SIZE:
        valid.clear()
    valid.add(topic)


def _checked(items: tuple[Any, ...], checked: set[tuple[Any, ...]]) -> tuple[Any, ...]:
    """``items`` (a path or targets), checked to be strings (raises ProtocolError)."""
    if items in checked:
        return items
    if not all(type(p) is str for p in items):
        raise ProtocolError("bad_type", "path and targets must be strings")
    if len(checked) >= STREAM_CACHE_SIZE:
        checked.clear()
    checked.add(items)
    return items
