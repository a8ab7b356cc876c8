"""Persistent publish: a publish sent as a request (``PUBLISH``), taken only if every
feature can store it, and confirmed after the store commit that holds it.

Once the confirmation leaves, the message is in this node's retention log (if a rule
covers its topic), in its durable queues, and in the store-and-forward queue of every
link it is routed over. A message that some feature cannot take (a full ``reject-new``
rule, durable or link queue) is refused whole, with the reason, never half-accepted.

A publish that names its ``(producer, pseq)`` is idempotent: the pair is recorded with the
message (:mod:`zbroker.store.producers`, same transaction), and a retry of a pair taken
already — by this node from a client, or from a link (the copy another node took) — is
not stored or routed again: it is answered as the first one was (its message ID and
retention sequence, ``duplicate: true``). A retry older than the node's window of that
producer is refused with an error saying it may have been stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from .. import wire
from ..errors import InvalidTopic, ProtocolError
from ..node import Feature, Op, Request
from ..node.context import Context
from ..store.producers import FORGOTTEN, Producers
from ..topics import validate_publish_topic
from ..wire.codec import unpack
from ..wire.frames import FMT_MSGPACK, I64

__all__ = ["PersistentPublish"]

_time = time.time
_I64 = I64


class PersistentPublish(Feature):
    name = "persistent"

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx

    def ops(self) -> Sequence[Op]:
        return (Op(wire.PUBLISH, self._publish, _subjects),)

    def _publish(self, req: Request) -> None:
        ctx = self._ctx
        get = req.body.get
        topic, payload, fmt, headers = get("topic"), get("payload"), get("fmt", 0), get("headers")
        producer: Any = get("producer")  # (checked below: ints, or both None)
        pseq: Any = get("pseq")
        try:
            _check(topic, payload, fmt, headers)
            if (producer is not None or pseq is not None) and not (
                type(producer) is int
                and type(pseq) is int
                and 0 < producer < _I64
                and 0 < pseq < _I64
            ):
                wire.check_producer([producer, pseq])  # (raises, saying what is wrong)
        except (ProtocolError, InvalidTopic) as exc:
            ctx.refuse(req, exc)
            return
        assert isinstance(topic, str) and isinstance(payload, bytes)
        producers = None
        if producer is not None:
            store = ctx.store
            if store is not None:
                producers = store.producers
                top = producers.newest.get(producer)
                if (
                    top is not None
                    and pseq <= top
                    and self._retried(req, producers, producer, pseq)
                ):
                    return
        refusal = ctx.admit({topic: [1, len(payload) + len(topic)]}, batch=False)
        if refusal is not None:
            # a persistent message that cannot be stored is refused, not half-accepted
            ctx.drop("rejected_persistent")
            ctx.error(req, refusal.message)
            return
        pipeline = ctx.pipeline
        (seq,) = pipeline.originate(
            [(topic, payload, fmt, headers)],
            persistent=True,
            receipt=True,
            producer=None if producer is None else [producer, pseq],
        )
        stored = pipeline.receipts.get(seq, {}).get("retained_seq")
        me, inc = ctx.broker_id, ctx.incarnation
        if producers is not None:
            producers.record(producer, pseq, (me, inc, seq, stored), _time())
        ctx.confirm(req, wire.PUBLISH, {"id": [me, inc, seq], "retained_seq": stored})

    def _retried(self, req: Request, producers: Producers, producer: int, pseq: int) -> bool:
        """Answer a retry of a ``(producer, pseq)`` taken already (True), or say nothing
        (False: it is new)."""
        taken = producers.check(producer, pseq)
        if taken is None:
            return False
        ctx = self._ctx
        if taken is FORGOTTEN:
            ctx.error(
                req,
                f"persistent publish {pseq} of producer {producer:x} is older than "
                f"the last {wire.PRODUCER_WINDOW} this node remembers of that producer: it "
                "may have been stored, and is not stored again",
            )
            return True
        producers.duplicates += 1
        origin, inc, seq, retained = taken
        # after the pass's commit like any confirmation: the first try may be in this pass
        body = {"id": [origin, inc, seq], "retained_seq": retained, "duplicate": True}
        ctx.confirm(req, wire.PUBLISH, body)
        return True

    def status(self, out: dict[str, Any]) -> None:
        if self._ctx.store is not None:
            producers = self._ctx.store.producers
            out["persistent"] = {"producers": len(producers), "duplicates": producers.duplicates}


def _subjects(body: dict[str, Any]) -> Iterable[tuple[str, str]]:
    topic = body.get("topic")
    return (("publish", topic),) if isinstance(topic, str) else ()


def _check(topic: Any, payload: Any, fmt: Any, headers: Any) -> None:
    if (
        type(topic) is not str
        or type(payload) is not bytes
        or type(fmt) is not int
        or fmt not in (0, 1)
    ):
        raise ProtocolError("bad_type", "PUBLISH needs topic, payload bytes and fmt")
    if headers is not None and (
        type(headers) is not dict or not all(type(k) is str for k in headers)
    ):
        raise ProtocolError("bad_type", "headers must be a map with string keys")
    if fmt == FMT_MSGPACK:  # the log and durables keep it for readers who decode it
        unpack(payload)
    validate_publish_topic(topic)
