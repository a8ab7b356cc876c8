"""What the hand-driven tests of zbroker.routing.engine.RoutingEngine
(``tests/routing/test_engine*.py``) share: :class:`Wires`, links between engines that pass
each one's :meth:`~RoutingEngine.flush` output to its peer as :class:`AdvertIn`, exactly as
a node or the simulator would, and readers of what an engine routes and holds."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from zbroker.routing import AdvertIn, LinkDown, LinkOptions, LinkUp, RoutingEngine, SendAdvert

Send = tuple[str, tuple[str, ...] | None, int]
Entry = tuple[str, str, tuple[str, ...] | None]


class Wires:
    """Links between hand-driven engines: link name -> the two ends."""

    def __init__(self, *engines: RoutingEngine) -> None:
        self.engines = {e.broker_id: e for e in engines}
        self.ends: dict[str, tuple[str, str]] = {}
        self.sent: list[tuple[str, SendAdvert]] = []  # (sender, action), in order

    def up(
        self,
        dialer: str,
        acceptor: str,
        link: str,
        *,
        duplex: bool = True,
        options: LinkOptions | None = None,
    ) -> None:
        opts = options or LinkOptions()
        self.ends[link] = (dialer, acceptor)
        d, a = self.engines[dialer], self.engines[acceptor]
        d.handle(LinkUp(link=link, peer=acceptor, can_send=True, can_receive=duplex, options=opts))
        a.handle(LinkUp(link=link, peer=dialer, can_send=duplex, can_receive=True, options=opts))

    def down(self, link: str) -> None:
        for end in self.ends.pop(link):
            self.engines[end].handle(LinkDown(link=link))

    def peer_of(self, sender: str, link: str) -> str:
        d, a = self.ends[link]
        return a if sender == d else d

    def pump(self) -> int:
        """Flush every engine and deliver, until quiet; the number of SendAdverts."""
        n = 0
        while True:
            moved = False
            for e in list(self.engines.values()):
                for action in e.flush():
                    moved = True
                    n += 1
                    self.sent.append((e.broker_id, action))
                    if action.link in self.ends:
                        peer = self.engines[self.peer_of(e.broker_id, action.link)]
                        peer.handle(
                            AdvertIn(link=action.link, full=action.full, entries=action.entries)
                        )
            if not moved:
                return n

    def entries_on(self, sender: str, link: str) -> list[Entry]:
        return [
            entry
            for s, action in self.sent
            if s == sender and action.link == link
            for entry in action.entries
        ]


def norm(sends: Iterable[Send]) -> list[Send]:
    """Sends with targets sorted (their order follows set iteration, not a rule)."""
    return sorted(
        (link, None if targets is None else tuple(sorted(targets)), copies)
        for link, targets, copies in sends
    )


def route(
    e: RoutingEngine,
    topic: str,
    path: tuple[str, ...] = (),
    targets: tuple[str, ...] | None = None,
) -> tuple[frozenset[str], list[Send]]:
    local, sends = e.route(topic, path, targets)
    return local, norm(sends)


def best(e: RoutingEngine) -> dict[tuple[str, str], tuple[str | None, list[str]]]:
    """Each (pattern, origin) the engine holds: its best link and path."""
    return {
        (str(x["pattern"]), str(x["origin"])): (
            cast(str | None, x["link"]),
            cast(list[str], x["path"]),
        )
        for x in e.interest()
    }


def engines(*ids: str) -> list[RoutingEngine]:
    return [RoutingEngine(i) for i in ids]
