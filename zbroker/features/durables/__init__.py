"""Durable subscriptions: named queues in the node's store that keep matching messages
while no subscriber is attached, and deliver them under credit, acknowledged.

:mod:`.feature` takes messages (its sink), serves the DURABLE_* requests and answers
admission for ``reject-new`` queues; :mod:`.pump` sends attached subscribers what their
credit allows after each commit, and notices subscribers that died.
"""

from .feature import DURABLE_PROBE_INTERVAL, Durables

__all__ = ["DURABLE_PROBE_INTERVAL", "Durables"]
