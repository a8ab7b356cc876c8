"""The credit window: how many messages a consumer may have in flight (sent, not yet
acknowledged), and which. Shared machinery of the features that deliver under credit.

A consumer states its credit when it attaches; the sender sends while ``room() > 0``,
remembers each message sent (by its queue position), and an acknowledgement of
``upto`` frees every position up to it. What was sent and not acknowledged when the
consumer leaves is what a later consumer gets again, flagged redelivered.
"""

from __future__ import annotations

import collections

__all__ = ["CreditWindow"]


class CreditWindow:
    __slots__ = ("credit", "sent", "sent_upto")

    def __init__(self, credit: int = 0) -> None:
        self.credit = credit
        self.sent: collections.deque[int] = collections.deque()  # positions sent, not acked
        self.sent_upto = 0  # the highest position sent

    def reset(self, credit: int) -> None:
        """A (new) consumer attached: nothing is in flight to it."""
        self.credit = credit
        self.sent = collections.deque()
        self.sent_upto = 0

    def room(self) -> int:
        return self.credit - len(self.sent)

    def sent_one(self, q: int) -> None:
        self.sent.append(q)
        self.sent_upto = q

    def acked(self, upto: int) -> None:
        sent = self.sent
        while sent and sent[0] <= upto:
            sent.popleft()

    def in_flight(self) -> int:
        return len(self.sent)
