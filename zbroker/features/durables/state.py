"""A durable subscription's live state (its messages are in the store)."""

from __future__ import annotations

from ...credit import CreditWindow
from ...selectors import Selector
from .shared import SharedState

__all__ = ["Durable"]


class Durable:
    __slots__ = (
        "consumer",
        "max_msgs",
        "name",
        "next_q",
        "pattern",
        "sealed",
        "selector",
        "shared",
        "window",
    )

    def __init__(self, name: str, pattern: str, next_q: int, max_msgs: int) -> None:
        self.name = name
        self.pattern = pattern
        self.next_q = next_q  # the queue position the next stored message takes
        self.max_msgs = max_msgs
        self.consumer: bytes | None = None  # routing id of the attached client session
        self.window = CreditWindow()
        #: set while the durable is shared (its consumers are there, not in ``consumer``)
        self.shared: SharedState | None = None
        #: only messages it accepts are stored (set after construction; see .selecting)
        self.selector: Selector | None = None
        #: moving away, at the handover: it stores no new message here (.outgoing)
        self.sealed = False
