"""Work queues: queue groups (live, at most once: each message to one member of each
group, network-wide).

:mod:`.feature` serves QUEUE_JOIN/ACK/LEAVE, picks where a message enters the network,
forwards QMSGS and floods QCAP; :mod:`.members` holds a group's members on this node and
their credit; :mod:`.report` is the status section. The routing rule itself is sans-IO,
in :mod:`zbroker.routing.groups`.
"""

from .feature import QueueGroups

__all__ = ["QueueGroups"]
