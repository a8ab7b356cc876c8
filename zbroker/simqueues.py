"""The simulator with queue groups: members join and leave on nodes, and a message that
enters the network is picked for one member node per group and forwarded to it alone,
exactly as a node does (:meth:`~zbroker.routing.groups.GroupTable.pick` where it enters,
:meth:`~zbroker.routing.groups.GroupTable.step` at every node on the way).

A member is plain interest in the group key on its node, as on a real node; what the
simulator records is each *group delivery*: the node, the group key, the message, and
whether the node had a member then.

A node's local branches (``add_node(local_branches=...)``) hold for groups as on a real
node, by the same table: a topic one holds is picked and stepped only to members on that
node, and with none there it is lost there (``group_lost["unroutable"]``), never sent on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from .routing.groups import group_key, revisit_refused
from .sim import Network
from .simtypes import MsgId

__all__ = ["GroupDelivery", "QueueNetwork"]


@dataclass(frozen=True, slots=True)
class GroupDelivery:
    node: str
    gkey: str
    topic: str
    msg_id: MsgId
    path: tuple[str, ...]
    had_member: bool


class QueueNetwork(Network):
    """A :class:`~zbroker.sim.Network` whose nodes may hold queue group members."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group_deliveries: list[GroupDelivery] = []
        self.group_lost: Counter[str] = Counter()  # reason -> messages
        self.repicked = 0

    def join(self, node_id: str, group: str, pattern: str) -> int:
        """A member of ``group`` on ``pattern`` at ``node_id``; returns its id."""
        return self.subscribe(node_id, group_key(group, pattern))

    def leave(self, node_id: str, member: int) -> None:
        self.unsubscribe(node_id, member)

    def set_policy(self, group: str, policy: str) -> None:
        for node in self.nodes.values():
            node.engine.groups.policies[group] = policy

    def members(self, node_id: str, gkey: str) -> int:
        node = self.nodes[node_id]
        return node.refs.get(gkey, 0) if node.alive else 0

    def publish(self, node_id: str, topic: str, headers: dict[str, Any] | None = None) -> MsgId:
        msg_id = super().publish(node_id, topic, headers)
        node = self.nodes[node_id]
        held: list[str] = []  # (groups a local branch keeps the topic from: lost here)
        for gkey, target in node.engine.groups.pick(topic, held=held):
            self._group_hop(node_id, topic, msg_id, (), gkey, target)
        self.group_lost["unroutable"] += len(held)
        return msg_id

    def _receive(self, node: Any, link: Any, frame: tuple[Any, ...]) -> None:
        if frame[0] != "qmsg":
            super()._receive(node, link, frame)
            return
        _, topic, msg_id, path, gkey, target = frame
        if revisit_refused(path, target, node.id):
            self.group_lost["loop"] += 1
            return
        step = node.engine.groups.step(gkey, target, topic, path)
        if step is None:
            self.group_lost["unroutable"] += 1
            return
        via, target, again = step
        self.repicked += again
        self._forward(node.id, topic, msg_id, path, gkey, target, via)

    def _group_hop(
        self, node_id: str, topic: str, msg_id: MsgId, path: tuple[str, ...], gkey: str, target: str
    ) -> None:
        via = self.nodes[node_id].engine.groups.next_hop(gkey, target)
        self._forward(node_id, topic, msg_id, path, gkey, target, via)

    def _forward(
        self,
        node_id: str,
        topic: str,
        msg_id: MsgId,
        path: tuple[str, ...],
        gkey: str,
        target: str,
        via: str | None,
    ) -> None:
        if via is None:
            had = self.members(node_id, gkey) > 0
            self.group_deliveries.append(GroupDelivery(node_id, gkey, topic, msg_id, path, had))
            return
        link = self.links[via]
        peer = link.acceptor if link.dialer == node_id else link.dialer
        self.stats.message_frames += 1
        self.stats.crossings[(msg_id, via, f"{node_id}>{peer}")] += 1
        self._send(link, node_id, ("qmsg", topic, msg_id, (*path, node_id), gkey, target))
