"""Persistent publish: a publish sent as a request (``PUBLISH``), taken only if every
feature can store it, and confirmed after the store commit that holds it.

Once the confirmation leaves, the message is in this node's retention log (if a rule
covers its topic), in its durable queues, and in the store-and-forward queue of every
link it is routed over. A message that some feature cannot take (a full ``reject-new``
rule, durable or link queue) is refused whole, with the reason, never half-accepted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .. import wire
from ..errors import InvalidTopic, ProtocolError
from ..node import Feature, Op, Request
from ..node.context import Context
from ..topics import validate_publish_topic

__all__ = ["PersistentPublish"]


class PersistentPublish(Feature):
    name = "persistent"

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx

    def ops(self) -> Sequence[Op]:
        return (Op(wire.PUBLISH, self._publish, _subjects),)

    def _publish(self, req: Request) -> None:
        ctx = self._ctx
        body = req.body
        topic, payload, fmt, headers = (
            body.get("topic"),
            body.get("payload"),
            body.get("fmt", 0),
            body.get("headers"),
        )
        try:
            _check(topic, payload, fmt, headers)
        except (ProtocolError, InvalidTopic) as exc:
            ctx.bad(ctx.source(req.ident), getattr(exc, "reason", "bad_topic"), str(exc))
            ctx.error(req, str(exc))
            return
        assert isinstance(topic, str) and isinstance(payload, bytes)
        refusal = ctx.admit({topic: [1, len(payload) + len(topic)]}, batch=False)
        if refusal is not None:
            # a persistent message that cannot be stored is refused, not half-accepted
            ctx.drop("rejected_persistent")
            ctx.error(req, refusal.message)
            return
        (seq,) = ctx.pipeline.originate(
            [(topic, payload, fmt, headers)], persistent=True, receipt=True
        )
        stored = ctx.pipeline.receipts.get(seq, {}).get("retained_seq")
        ctx.confirm(
            req, wire.PUBLISH, {"id": [ctx.broker_id, ctx.incarnation, seq], "retained_seq": stored}
        )


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
    validate_publish_topic(topic)
