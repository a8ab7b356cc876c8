"""Which permission each control request needs: declared per op, as data.

A client may publish to topics its ``publish`` patterns match and subscribe to patterns
its ``subscribe`` patterns cover (:mod:`.permissions`). Each control op that acts on
topics names here its *permission subject*: the action checked and where the request
names what it acts on. An op not in :data:`OP_PERMISSIONS` needs no permission (HELLO,
status, staging commit and abort, ...); link frames are checked by the link's user, not
here. A field of the wrong type names nothing to check: the op's handler rejects it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from .. import wire

__all__ = ["OP_PERMISSIONS", "Action", "OpPermission", "Subject"]

Action = Literal["publish", "subscribe"]

#: where a request names its subject:
#: ``topic`` -- ``req["topic"]``;
#: ``rows`` -- the topic of each staged row (``req["rows"][i][0]``): staged rows are
#: checked when staged, so the commit publishes only what passed;
#: ``pattern`` -- ``req.get("pattern", ">")``;
#: ``durable`` -- the pattern of the durable subscription ``req["name"]`` (the node knows
#: it; a durable it does not know names nothing)
Subject = Literal["topic", "rows", "pattern", "durable"]


@dataclass(frozen=True, slots=True)
class OpPermission:
    """The permission an op needs: ``action`` on each of the request's subjects."""

    action: Action
    subject: Subject

    def subjects(
        self, req: dict[str, Any], durable_pattern: Callable[[str], str | None]
    ) -> tuple[str, ...]:
        """The topics (publish) or patterns (subscribe) that ``req`` acts on.
        ``durable_pattern(name)``: the pattern of a known durable subscription, or None."""
        kind = self.subject
        if kind == "topic":
            topic = req.get("topic")
            return (topic,) if isinstance(topic, str) else ()
        if kind == "pattern":
            pattern = req.get("pattern", ">")
            return (pattern,) if isinstance(pattern, str) else ()
        if kind == "rows":
            rows = req.get("rows")
            if type(rows) is not list:
                return ()
            return tuple(r[0] for r in rows if type(r) is list and r and isinstance(r[0], str))
        name = req.get("name")
        found = durable_pattern(name) if isinstance(name, str) else None
        return (found,) if found is not None else ()


#: op -> the permission it needs (ops not listed need none)
OP_PERMISSIONS: Mapping[int, OpPermission] = MappingProxyType(
    {
        wire.PUBLISH: OpPermission("publish", "topic"),
        wire.STAGE: OpPermission("publish", "rows"),
        wire.READ: OpPermission("subscribe", "pattern"),
        wire.DURABLE_OPEN: OpPermission("subscribe", "pattern"),
        wire.DURABLE_ACK: OpPermission("subscribe", "durable"),
        wire.DURABLE_CLOSE: OpPermission("subscribe", "durable"),
        wire.DURABLE_DELETE: OpPermission("subscribe", "durable"),
    }
)
