"""The fuzz oracle for the frames of an established link (:mod:`.fuzz_oracle` has the other
sockets' and the frames before a handshake): which entries of a MSGS, MSGR, PMSGS or QMSGS
frame the node must count as bad input, and why; adverts, gaps, queue credit and the frames
of topics with state; the inbound link position PMSGS entries are taken under. Written from
the documented protocol (``zbroker.wire``'s docstring and codec, ``zbroker.topics``, the
numbers the node's store can hold), not from the node's code."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from zbroker import wire
from zbroker.config import validate_broker_id
from zbroker.errors import ConfigError, InvalidTopic, ProtocolError
from zbroker.identity import EPOCH
from zbroker.routing.groups import split_key
from zbroker.topics import validate_pattern, validate_topic
from zbroker.wire import frames as wire_frames
from zbroker.wire import state as wire_state
from zbroker.wire.frames import GAP
from zbroker.wire.gaps import check_gap

from .fuzz_common import LINK_PEER

#: adds what one link frame makes the node count to the bad-input reasons
LinkOutcome = Callable[[list[Any], Counter[str]], None]

#: the numbers a node takes in a MSGS entry: what its SQLite store can hold (INTEGER is
#: signed 64-bit; a NaN ts would be NULL), ts in seconds
_INT64_END = 2**63
_TS_LIMIT = 1e15


def msgs_entry_outcome(m: Any) -> str | None:
    """The bad-input reason of one MSGS entry, None if the node takes it."""
    try:
        wire.check_link_msg(m)
    except ProtocolError as exc:
        return exc.reason
    topic, _, _, _, _, inc, seq, ts, path, targets = m
    if not all(type(p) is str for p in path) or (
        targets is not None and not all(type(t) is str for t in targets)
    ):
        return "bad_type"  # path and targets are arrays of broker IDs
    if not (0 <= inc < _INT64_END and 0 <= seq < _INT64_END and -_TS_LIMIT < ts < _TS_LIMIT):
        return "bad_value"
    try:
        validate_topic(topic)
    except InvalidTopic:
        return "bad_topic"
    return None


def _msgr_outcome(value: list[Any], bad: Counter[str]) -> None:
    """MSGR: a run whose shared fields are bad loses each of its entries (one reason
    each), a bad entry only itself (zbroker/wire/runs.py)."""
    if len(value) != 2 or type(value[1]) is not list:
        bad["bad_shape"] += 1
        return
    for run in value[1]:
        if type(run) is not list or len(run) != 6 or type(run[5]) is not list or not run[5]:
            bad["bad_shape"] += 1  # (a run without entries too)
            continue
        reason = msgr_run_outcome(run)
        if reason is not None:
            bad[reason] += len(run[5])
            continue
        for e in run[5]:
            reason = msgr_entry_outcome(e) or _sender_outcome(run[3])
            if reason is not None:
                bad[reason] += 1


def _sender_outcome(path: list[str]) -> str | None:
    """A message whose path does not end with the link's peer (every node adds itself
    before it sends): a peer speaking for another node."""
    return None if path and path[-1] == LINK_PEER else "path_not_from_peer"


def msgr_run_outcome(run: list[Any]) -> str | None:
    """The bad-input reason of a MSGR run's shared fields, None if good."""
    topic, origin, inc, path, targets, _ = run
    if (
        type(topic) is not str
        or type(origin) is not str
        or type(inc) is not int
        or type(path) is not list
        or (targets is not None and type(targets) is not list)
        or not all(type(p) is str for p in path)
        or (targets is not None and not all(type(t) is str for t in targets))
    ):
        return "bad_type"
    if not 0 <= inc < _INT64_END:
        return "bad_value"
    try:
        validate_topic(topic)
    except InvalidTopic:
        return "bad_topic"
    return None


def msgr_entry_outcome(e: Any) -> str | None:
    """The bad-input reason of a MSGR entry ``[payload, fmt, headers, seq, ts]``."""
    if type(e) is not list or len(e) != 5:
        return "bad_shape"
    payload, fmt, headers, seq, ts = e
    if (
        type(payload) is not bytes
        or type(fmt) is not int
        or fmt not in (0, 1)
        or (headers is not None and type(headers) is not dict)
        or type(seq) is not int
        or type(ts) not in (float, int)
    ):
        return "bad_type"
    if not (0 <= seq < _INT64_END and -_TS_LIMIT < ts < _TS_LIMIT):
        return "bad_value"
    return None


def as_runs(entries: list[list[Any]]) -> list[list[Any]]:
    """MSGS entries as MSGR runs: consecutive ones of one topic, origin, incarnation,
    path and targets share a run."""
    runs: list[list[Any]] = []
    for topic, payload, fmt, headers, origin, inc, seq, ts, path, targets in entries:
        head = [topic, origin, inc, path, targets]
        if not runs or runs[-1][:5] != head:
            runs.append([*head, []])
        runs[-1][5].append([payload, fmt, headers, seq, ts])
    return runs


def pmsgs_entry_outcome(m: Any) -> str | None:
    """The bad-input reason of a PMSGS entry the node takes under its link sequence (its
    path ends with the link's peer, as a MSGS entry's)."""
    try:
        wire.check_pmsgs_entry(m)
    except ProtocolError as exc:
        return exc.reason
    return msgs_entry_outcome(m[1:11]) or _sender_outcome(m[9])


#: the fuzz link's inbound position as the node keeps it: [epoch, last lseq taken]
_PMSGS_POSITION: list[int] = [-1, 0]


def _pmsgs_outcome(value: list[Any], bad: Counter[str]) -> None:
    """PMSGS on an established link: entries are taken strictly in link-sequence order
    (zbroker.forward); only those taken are checked further."""
    try:
        epoch, base, entries = wire.decode_pmsgs(value)
    except ProtocolError as exc:
        bad[exc.reason] += 1
        return
    pos = _PMSGS_POSITION
    for m in entries:
        try:
            lseq = wire.pmsgs_lseq(m)
        except ProtocolError as exc:
            bad[exc.reason] += 1
            continue
        # the frame's epoch and base move the position only when an entry reaches
        # Forwarder.accept (a frame without entries, or with only bad lseqs, moves nothing)
        if pos[0] != epoch:
            pos[:] = [epoch, 0]
        pos[1] = max(pos[1], base - 1)
        if lseq != pos[1] + 1:
            continue  # a resend (taken before) or past a gap: waits, not bad input
        pos[1] = lseq
        reason = pmsgs_entry_outcome(m)
        if reason is not None:
            bad[reason] += 1


def _msgs_outcome(value: list[Any], bad: Counter[str]) -> None:
    """MSGS: each bad entry counts once, for its own reason."""
    if len(value) != 2 or type(value[1]) is not list:
        bad["bad_shape"] += 1
        return
    for m in value[1]:
        reason = msgs_entry_outcome(m) or _sender_outcome(m[8])
        if reason is not None:
            bad[reason] += 1


def _advert_outcome(value: list[Any], bad: Counter[str]) -> None:
    """ADVERT: a bad pattern or origin in any entry makes the whole frame one bad_advert."""
    try:
        _, entries = wire.decode_advert(value)
        for pattern, origin, _path in entries:
            try:
                validate_pattern(pattern)
                validate_broker_id(origin)
            except (InvalidTopic, ConfigError):
                raise ProtocolError("bad_advert") from None
    except ProtocolError as exc:
        bad[exc.reason] += 1


def _qmsgs_outcome(value: list[Any], bad: Counter[str]) -> None:
    """QMSGS (queue groups): a MSGS entry ending with [target, group key], its path
    ending with the link's peer."""
    try:
        entries = wire.decode_qmsgs(value)
    except ProtocolError as exc:
        bad[exc.reason] += 1
        return
    for m in entries:
        reason = msgs_entry_outcome(m)
        if reason is None and (m[9] is None or len(m[9]) != 2):
            reason = "bad_type"
        reason = reason or _sender_outcome(m[8])
        if reason is not None:
            bad[reason] += 1


def _checked(check: Callable[[list[Any]], Any]) -> LinkOutcome:
    """The outcome of a frame that is bad (once, for the check's reason) if ``check``
    refuses it, and taken otherwise."""

    def outcome(value: list[Any], bad: Counter[str]) -> None:
        try:
            check(value)
        except ProtocolError as exc:
            bad[exc.reason] += 1

    return outcome


def _qcap_outcome(value: list[Any], bad: Counter[str]) -> None:
    """QCAP: a malformed frame is one bad input; each entry whose key is not a queue
    group's, or whose stamp (an incarnation, seconds since 2024, shifted 32 bits) is over
    a day ahead of the clock, is one more."""
    try:
        entries = wire.decode_qcap(value)
    except ProtocolError as exc:
        bad[exc.reason] += 1
        return
    latest = (int(time.time()) - EPOCH + 86_400) << 32
    for gkey, _origin, stamp, _members, _free in entries:
        if split_key(gkey) is None or stamp > latest:
            bad["bad_value"] += 1


def _taken(value: list[Any], bad: Counter[str]) -> None:
    """A frame the node takes whatever it carries (HEARTBEAT)."""


#: topics with state (zbroker.wire.state): their link frames, checked by the codec
_STATE_LINK_CHECKS: dict[int, Callable[[list[Any]], Any]] = {
    wire.STATE_QUERY: wire_state.check_query,
    wire.STATE_ANSWER: wire_state.check_answer,
    wire_frames.MISSING_ASK: wire_state.check_missing_ask,
    wire_frames.MISSING_REPLY: wire_state.check_missing_reply,
}

#: what each link frame type on an established link adds to the bad-input reasons
_LINK_OUTCOMES: dict[int, LinkOutcome] = {
    wire.HEARTBEAT: _taken,
    wire.PMSGS: _pmsgs_outcome,
    wire.PACK: _checked(wire.decode_pack),
    wire.MSGS: _msgs_outcome,
    wire.MSGR: _msgr_outcome,
    wire.ADVERT: _advert_outcome,
    GAP: _checked(check_gap),
    wire.QMSGS: _qmsgs_outcome,
    wire.QCAP: _qcap_outcome,
    **{op: _checked(check) for op, check in _STATE_LINK_CHECKS.items()},
}


def link_frame_outcome(value: list[Any], bad: Counter[str]) -> None:
    """A frame of a link type on an established link (BYE and well-formed REFUSE
    excluded)."""
    op = value[0]
    if op in _LINK_OUTCOMES:
        _LINK_OUTCOMES[op](value, bad)
        return
    if op == wire.LINK_REFUSE:  # malformed (a well-formed one is never sent on the link)
        bad["bad_shape"] += 1
        return
    bad["unexpected"] += 1  # LINK_WELCOME once the link is up
