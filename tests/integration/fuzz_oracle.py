"""The fuzz test's oracle: what the node must do with each frame (count it as bad input,
under which reason, or take it), from the documented protocol (``zbroker.wire``'s docstring
and codec, ``zbroker.topics``, the numbers a MSGS entry may carry so that the node's store
can hold them), not from the node's code: the publish socket, the control requests and the
frames before a handshake, the staged writes, subscriptions. The frames of an established
link have their own: :mod:`.fuzz_link_oracle`. :mod:`.test_fuzz` checks the node's counters
against both exactly."""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgpack

from tests.integration.fuzz_common import LIMIT, pack
from tests.integration.fuzz_link_oracle import link_frame_outcome
from zbroker import wire
from zbroker.const import LINK_FRAME_SLACK
from zbroker.errors import InvalidTopic, ProtocolError
from zbroker.features.staging import Staging, StagingError
from zbroker.selectors import SelectorError, selector
from zbroker.stateful import OWNER, REMOVED, VERSION
from zbroker.topics import validate_pattern, validate_publish_topic


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def publish_outcome(frame: bytes) -> tuple[Counter[str], int]:
    """(bad-input reasons, publishes accepted) for one frame on the publish socket: one
    publish, or a publish batch (``[frame: bin, ...]``) whose every element counts alone."""
    bad: Counter[str] = Counter()
    if len(frame) > LIMIT:
        bad["oversized"] += 1
        return bad, 0
    try:
        elements = wire.publish_batch_elements(frame)
    except ProtocolError as exc:
        bad[exc.reason] += 1
        return bad, 0
    if elements and type(elements[0]) is list:
        return _publish_runs_outcome(elements)
    accepted = 0
    for element in [frame] if elements is None else elements:
        if type(element) is not bytes:
            bad["bad_shape"] += 1
            continue
        reason = _single_publish_outcome(element)
        if reason is None:
            accepted += 1
        else:
            bad[reason] += 1
    return bad, accepted


def _publish_runs_outcome(runs: list[Any]) -> tuple[Counter[str], int]:
    """A batch of runs, ``[[topic, [[payload, fmt, headers], ...]], ...]``: a run not of
    that shape (or without entries) counts once as bad_shape; a run whose topic is bad
    counts every entry by the topic's fault; each entry is judged as the publish frame it
    stands for, except that an entry not of 3 elements is bad_shape."""
    bad: Counter[str] = Counter()
    accepted = 0
    for run in runs:
        if type(run) is not list or len(run) != 2 or type(run[1]) is not list or not run[1]:
            bad["bad_shape"] += 1
            continue
        topic, entries = run
        if type(topic) is not str:
            bad["bad_type"] += len(entries)
            continue
        try:
            validate_publish_topic(topic)
        except InvalidTopic:
            bad["bad_topic"] += len(entries)
            continue
        for e in entries:
            reason = (
                _single_publish_outcome(pack([topic, *e]))
                if type(e) is list and len(e) == 3
                else "bad_shape"
            )
            if reason is None:
                accepted += 1
            else:
                bad[reason] += 1
    return bad, accepted


def _single_publish_outcome(frame: bytes) -> str | None:
    try:
        topic = wire.decode_publish(frame)[0]
    except ProtocolError as exc:
        return exc.reason
    try:
        validate_publish_topic(topic)
    except InvalidTopic:
        return "bad_topic"
    return None


def decoded(frame: bytes) -> list[Any] | None:
    """The frame's array as the control socket decodes it, None if it cannot (or refuses
    it for its size: a link frame may pass LIMIT by LINK_FRAME_SLACK, nothing else may)."""
    if len(frame) > LIMIT + LINK_FRAME_SLACK:
        return None
    try:
        value = wire.decode_frame(frame)
    except ProtocolError:
        return None
    if len(frame) > LIMIT and value[0] not in wire.LINK_TYPES:
        return None
    return value


def is_hello_map(value: list[Any] | None) -> bool:
    return value is not None and value[0] == wire.LINK_HELLO and _is_map_frame(value)


def _is_map_frame(value: list[Any]) -> bool:
    return len(value) == 2 and type(value[1]) is dict


def is_staging_request(value: list[Any] | None) -> bool:
    return value is not None and value[0] in _STAGING_OPS


def ends_link(value: list[Any] | None) -> bool:
    """A frame that ends (or replaces) an established link by design."""
    if value is None:
        return False
    op = value[0]
    return op == wire.BYE or (op in (wire.LINK_REFUSE, wire.LINK_HELLO) and _is_map_frame(value))


def _decodes(payload: bytes) -> bool:
    """Whether a payload marked msgpack holds exactly one msgpack value."""
    try:
        msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException, TypeError):  # (an unhashable map key)
        return False
    return True


def _publish_request_outcome(body: dict[str, Any], decode: bool = True) -> str | None:
    """A persistent PUBLISH's checks (and a STATE_SET's): types, headers, a payload marked
    msgpack that must decode (not with ``decode`` False), the topic."""
    topic, payload, fmt, headers = (
        body.get("topic"),
        body.get("payload"),
        body.get("fmt", 0),
        body.get("headers"),
    )
    if type(topic) is not str or type(payload) is not bytes or type(fmt) is not int:
        return "bad_type"
    if fmt not in (wire.FMT_BYTES, wire.FMT_MSGPACK):
        return "bad_type"
    if headers is not None and (
        type(headers) is not dict or not all(type(k) is str for k in headers)
    ):
        return "bad_type"
    if decode and fmt == wire.FMT_MSGPACK and not _decodes(payload):
        return "not_msgpack"
    try:
        validate_publish_topic(topic)
    except InvalidTopic:
        return "bad_topic"
    return None


def _state_set_outcome(body: dict[str, Any]) -> str | None:
    """A STATE_SET's checks, in the node's order: types, the node's own headers (version,
    owner, removed), the topic."""
    if type(body.get("topic")) is not str:
        return "bad_type"
    headers = body.get("headers")
    reason = _publish_request_outcome({**body, "topic": "FZ.ok"}, decode=False)
    if reason is None and headers and any(k in headers for k in (VERSION, OWNER, REMOVED)):
        return "bad_value"
    return reason or _publish_request_outcome(body)


# every op of the protocol is a request a client may send, except those only the node sends
_REQUEST_OPS = frozenset(wire.OPS) - {wire.DELIVER, wire.QDELIVER, wire.ERROR, wire.LEAVING}
_STAGING_OPS = frozenset({wire.STAGE, wire.STAGE_COMMIT, wire.STAGE_ABORT})


class StagingOracle:
    """What the node's staged writes should do with each STAGE* request, in the order the
    node gets them (the fuzzer sends them all on one connection): a mirror of the rules in
    ``Node._staging_op`` over the sans-IO :class:`Staging` (whose own rules have their
    unit and property tests). Returns (bad-input reason or None, rows published)."""

    def __init__(self) -> None:
        self.staging = Staging()
        self.batches: set[tuple[str, int]] = set()

    def outcome(self, op: int, req: dict[Any, Any]) -> tuple[str | None, int]:
        s = self.staging
        try:
            if op == wire.STAGE:
                s.stage(req.get("token"), req.get("part"), req.get("rows"), group=req.get("group"))
                return None, 0
            if op == wire.STAGE_ABORT:
                group = s.check_group(req.get("group"))
                s.discard(req.get("tokens", []))
                if group is not None:
                    s.discard_group(group)
                return None, 0
            group = s.check_group(req.get("group"))  # a bad one: nothing of the commit applied
            tokens, writer, batch = req.get("tokens"), req.get("writer"), req.get("batch")
            key = None
            if writer is not None:
                if (
                    type(writer) is not str
                    or not 0 < len(writer) <= 256
                    or type(batch) is not int
                    or not 0 <= batch < 2**63
                ):
                    raise StagingError("bad writer")
                key = (writer, batch)
            if key is None and s.was_applied(tokens):
                published = 0
            elif key is not None and key in self.batches:
                # a batch applied already: its tokens need only be well formed (staged
                # anew after a restart, or not at all: the same commit sent again)
                s.discard(s.commit_names(tokens))
                published = 0
            else:
                names = s.check_commit(tokens)
                if not names and key is None:
                    published = 0
                else:
                    published = len(s.take(tokens)[1])
                    if key is not None:
                        self.batches.add(key)
            if group is not None:
                s.discard_group(group)
            return None, published
        except StagingError:
            return "bad_staging", 0


def control_outcome(
    frame: bytes, linked: bool, staging: StagingOracle | None = None
) -> tuple[Counter[str], int]:
    """(bad-input reasons, publishes accepted) for one single-part frame on the ROUTER from
    a DEALER with (``linked``) or without an established link."""
    bad: Counter[str] = Counter()
    if len(frame) > LIMIT + LINK_FRAME_SLACK:
        bad["oversized"] += 1
        return bad, 0
    try:
        value = wire.decode_frame(frame)
    except ProtocolError as exc:
        bad[exc.reason] += 1
        return bad, 0
    op = value[0]
    if op not in wire.LINK_TYPES and len(frame) > LIMIT:
        bad["oversized"] += 1  # only link frames carry the slack
        return bad, 0
    if op in wire.LINK_TYPES:
        if op == wire.LINK_HELLO:
            if not _is_map_frame(value):
                bad["bad_shape"] += 1
            return bad, 0  # else refused or accepted: a handshake, not bad input
        if linked:
            link_frame_outcome(value, bad)
        return bad, 0  # no link: answered with LINK_REFUSE (or ignored, for BYE)
    if len(value) != 3 or type(value[1]) is not int or type(value[2]) is not dict:
        bad["bad_shape"] += 1
        return bad, 0
    if op == wire.PUBLISH:
        reason = _publish_request_outcome(value[2])
        if reason is None:
            return bad, 1
        bad[reason] += 1
    elif op == wire.STATE_SET:
        reason = _state_set_outcome(value[2])
        if reason is None:
            return bad, 1
        bad[reason] += 1
    elif op in _STAGING_OPS:
        assert staging is not None, "staging ops need the oracle"
        reason, published = staging.outcome(op, value[2])
        if reason is not None:
            bad[reason] += 1
        return bad, published
    elif op not in _REQUEST_OPS:
        bad["unknown_op"] += 1
    return bad, 0


def subscription_outcome(msg: bytes) -> str | None:
    """The bad-input reason of a message the XPUB passes up, None if it is well-formed."""
    if not msg or msg[0] not in (0, 1):
        return "bad_subscription"
    key = msg[1:]
    if key.startswith(wire.SYNC_PREFIX):
        return None
    if not key.endswith(b"\0"):
        return "bad_subscription"
    try:
        name = key[:-1].decode("utf-8")
        pattern, sep, text = name.partition(wire.SELECTOR_SEP)
        validate_pattern(pattern)
    except (UnicodeDecodeError, InvalidTopic):
        return "bad_pattern"
    if sep:  # a subscription with a selector: its text must parse
        try:
            selector(text)
        except SelectorError:
            return "bad_selector"
    return None
