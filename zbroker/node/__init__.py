"""The node kernel: the loop, the one message path, and the feature interface.

:class:`Node` runs one broker node's sockets in one thread; the features it runs are
given to it (:class:`zbroker.Broker` composes them). See :mod:`.kernel` for the phases of
a pass, :mod:`.pipeline` for the message path, :mod:`.feature` for the interface.
"""

from __future__ import annotations

from .feature import Feature, Op, Refusal, Request, monitored
from .kernel import CALL, STOP, Node
from .sockets import command_client, format_endpoint

__all__ = [
    "CALL",
    "STOP",
    "Feature",
    "Node",
    "Op",
    "Refusal",
    "Request",
    "command_client",
    "format_endpoint",
    "monitored",
]
