"""What links ask of the rest of the node (the kernel's side of
:class:`~zbroker.links.table.LinkHooks`): messages to the pipeline, feature frames to
their feature, and link up/down/advertisement notices to the features that take them.

Link up and down reach features synchronously, before the link's next frame is handled
(store-and-forward must resume or pause first); observers also get a node event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .events import HandshakeRefused, LinkWentDown, LinkWentUp
from .feature import Feature, overrides

if TYPE_CHECKING:
    from ..links.state import Link
    from .kernel import Node

__all__ = ["KernelHooks"]


class KernelHooks:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._frames: dict[int, Callable[[Link, list[Any]], int]] = {}
        self._ups: list[Feature] = []
        self._downs: list[Feature] = []
        self._adverts: list[Feature] = []

    def add_frames(self, feature: Feature) -> None:
        """Take ``feature``'s link frame types and link hooks (at attach)."""
        for op, handler in feature.link_frames().items():
            if op in self._frames:
                raise ValueError(f"link frame type {op} handled twice")
            self._frames[op] = handler
        if overrides(feature, "link_up"):
            self._ups.append(feature)
        if overrides(feature, "link_down"):
            self._downs.append(feature)
        if overrides(feature, "advert_in"):
            self._adverts.append(feature)

    def link_msgs(self, link: Link, op: int, batch: list[Any], n: int) -> None:
        self._node.pipeline.on_msgs(link, op, batch, n)

    def link_frame(self, link: Link, value: list[Any]) -> int | None:
        handler = self._frames.get(value[0])
        return None if handler is None else handler(link, value)

    def link_up(self, link: Link, now: float) -> None:
        for f in self._ups:
            f.link_up(link, now)
        self._node.events.append(LinkWentUp(link=link.name, peer=link.peer))

    def link_down(self, link: Link, reason: str, was_up: bool, now: float, clean: bool) -> None:
        for f in self._downs:
            f.link_down(link, now)
        if was_up:
            self._node.events.append(
                LinkWentDown(link=link.name, peer=link.peer, reason=reason, clean=clean)
            )

    def handshake_refused(self, link: str, reason: str) -> None:
        self._node.emit(HandshakeRefused(link=link, reason=reason))

    def advert_in(self, link: Link) -> None:
        for f in self._adverts:
            f.advert_in(link)
