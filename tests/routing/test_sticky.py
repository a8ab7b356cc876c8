"""Rule 6 of the routing engine: sticky (durable-backed) interest survives link outages.

Hand-driven engines in a chain A - B - C (and a triangle for the preference rule):

* a sticky local subscription is advertised sticky, and nodes further away keep the flag;
* ``LinkDown(keep_sticky=True)`` keeps sticky entries on a ghost of the link: the node
  still routes toward it and keeps advertising the entry; non-sticky entries go at once;
* a live path always beats a ghost; the ghost is never advertised to;
* ``LinkUp`` of the same link revives the ghost's entries until the peer's full table;
  ``LinkDown`` without ``keep_sticky`` forgets it; ``restore_ghost`` rebuilds it;
* turning stickiness off (the durable deleted, clients still subscribed) is advertised;
* an entry whose best lies on a ghost is advertised *held*, and whoever hears it ranks it
  below every live entry: in a square, the node beyond the ghost's fails over to the
  live path, and back once the link returns.
"""

from __future__ import annotations

from zbroker.routing import AdvertIn, LinkDown, LinkUp, LocalSubscribe, RoutingEngine

from .wires import Wires


class StickyWires(Wires):
    """Wires that carry the sticky flags of advertisements too."""

    def pump(self) -> int:
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
                            AdvertIn(
                                link=action.link,
                                full=action.full,
                                entries=action.entries,
                                sticky=action.sticky,
                                held=action.held,
                            )
                        )
            if not moved:
                return n

    def cut(self, link: str) -> None:
        """Both ends see the link go down, keeping sticky entries."""
        for end in self.ends.pop(link):
            self.engines[end].handle(LinkDown(link=link, keep_sticky=True))


def chain() -> tuple[StickyWires, RoutingEngine, RoutingEngine, RoutingEngine]:
    a, b, c = RoutingEngine("A"), RoutingEngine("B"), RoutingEngine("C")
    w = StickyWires(a, b, c)
    w.up("B", "A", "ab")
    w.up("C", "B", "bc")
    c.handle(LocalSubscribe(pattern="D.>", sticky=True))
    c.handle(LocalSubscribe(pattern="L.>"))
    w.pump()
    return w, a, b, c


def row(e: RoutingEngine, pattern: str) -> dict[str, object] | None:
    rows = [r for r in e.interest() if r["pattern"] == pattern]
    return rows[0] if rows else None


def present_row(e: RoutingEngine, pattern: str) -> dict[str, object]:
    """The row of ``pattern``, which must be there."""
    found = row(e, pattern)
    assert found is not None, pattern
    return found


def test_sticky_flag_travels_and_survives_a_cut() -> None:
    w, a, b, _ = chain()
    assert row(a, "D.>") == {
        "pattern": "D.>",
        "origin": "C",
        "path": ["C", "B"],
        "hops": 2,
        "link": "ab",
        "sticky": True,
    }
    assert row(a, "L.>") is not None and "sticky" not in present_row(a, "L.>")
    w.cut("bc")
    w.pump()
    # B keeps routing D.> toward the down link; L.> is withdrawn at once, everywhere
    assert b.ghosts() == ["bc"]
    assert row(b, "D.>") == {
        "pattern": "D.>",
        "origin": "C",
        "path": ["C"],
        "hops": 1,
        "link": "bc",
        "sticky": True,
        "link_down": True,
    }
    assert row(b, "L.>") is None and row(a, "L.>") is None
    assert b.route("D.x", ("A",), ("C",))[1] == [("bc", ("C",), 1)]
    # A still has the route via B (B advertises the ghost's entry like any best entry)
    assert row(a, "D.>") is not None and present_row(a, "D.>")["link"] == "ab"
    assert a.route("D.x", (), None)[1] == [("ab", ("C",), 1)]


def test_the_link_coming_back_revives_then_the_full_table_decides() -> None:
    w, _, b, c = chain()
    w.cut("bc")
    w.pump()
    w.up("C", "B", "bc")
    assert b.ghosts() == []
    assert present_row(b, "D.>")["link"] == "bc"
    assert "link_down" not in present_row(b, "D.>")
    # C deleted the durable while away: its full table lacks D.>, so B withdraws it
    c.handle(LocalSubscribe(pattern="D.>", sticky=False))
    from zbroker.routing import LocalUnsubscribe

    c.handle(LocalUnsubscribe(pattern="D.>"))
    w.pump()
    assert row(b, "D.>") is None


def test_a_live_path_beats_a_ghost_and_a_ghost_is_not_advertised_to() -> None:
    a, b, c = RoutingEngine("A"), RoutingEngine("B"), RoutingEngine("C")
    w = StickyWires(a, b, c)
    w.up("A", "C", "ac")
    w.up("B", "A", "ab")
    w.up("C", "B", "bc")
    c.handle(LocalSubscribe(pattern="D.>", sticky=True))
    w.pump()
    assert present_row(a, "D.>")["link"] == "ac"
    w.cut("ac")
    w.pump()
    # the ghost of ac holds the entry, but the live path through B wins
    assert a.ghosts() == ["ac"]
    assert present_row(a, "D.>")["link"] == "ab"
    assert present_row(a, "D.>")["path"] == ["C", "B"]
    sent_before = len(w.sent)
    a.handle(LocalSubscribe(pattern="X", sticky=True))
    w.pump()
    assert all(action.link != "ac" for _, action in w.sent[sent_before:])
    # the live path goes too: the ghost takes over
    w.cut("ab")
    w.pump()
    assert present_row(a, "D.>")["link"] == "ac"
    assert present_row(a, "D.>")["link_down"] is True


def test_forget_and_restore_a_ghost() -> None:
    w, _, b, _ = chain()
    w.cut("bc")
    w.pump()
    entries = b.sticky_entries("bc")
    assert entries == [("D.>", "C", ("C",))]
    b.handle(LinkDown(link="bc"))  # expired
    w.pump()
    assert b.ghosts() == [] and row(b, "D.>") is None
    # a restarted B rebuilds it from what it stored
    fresh = RoutingEngine("B")
    fresh.restore_ghost("bc", "C", entries)
    assert fresh.ghosts() == ["bc"]
    assert present_row(fresh, "D.>")["link_down"] is True
    fresh.handle(LinkUp(link="ab", peer="A"))
    (advert,) = fresh.flush()
    assert advert.entries == (("D.>", "C", ("C", "B")),)
    assert advert.sticky == frozenset({("D.>", "C")})


def test_stickiness_change_is_advertised() -> None:
    w, a, _, c = chain()
    c.handle(LocalSubscribe(pattern="L.>", sticky=True))
    w.pump()
    assert present_row(a, "L.>")["sticky"] is True
    c.handle(LocalSubscribe(pattern="L.>", sticky=False))
    w.pump()
    assert "sticky" not in present_row(a, "L.>")
    w.cut("bc")
    w.pump()
    assert row(a, "L.>") is None


def test_a_held_entry_ranks_below_a_live_path_beyond_the_ghosts_node() -> None:
    """Square P-A, P-B, A-W, B-W with a durable on W. A's link to W goes down: A keeps
    its ghost and advertises the entry held, so P takes the equally short live path
    through B (before, P kept its tie-break choice A and its messages waited in A's
    queue, the live subscribers on W getting none); A takes it too. Back up, P returns."""
    p, a, b, w_ = (RoutingEngine(n) for n in "PABW")
    w = StickyWires(p, a, b, w_)
    w.up("P", "A", "pa")
    w.up("P", "B", "pb")
    w.up("A", "W", "aw")
    w.up("B", "W", "bw")
    w_.handle(LocalSubscribe(pattern="D.>", sticky=True))
    w.pump()
    assert row(p, "D.>") == {
        "pattern": "D.>", "origin": "W", "path": ["W", "A"], "hops": 2, "link": "pa",
        "sticky": True,
    }  # fmt: skip
    w.cut("aw")
    w.pump()
    assert a.ghosts() == ["aw"]
    assert row(p, "D.>") == {
        "pattern": "D.>", "origin": "W", "path": ["W", "B"], "hops": 2, "link": "pb",
        "sticky": True,
    }  # fmt: skip
    assert p.route("D.x", (), None)[1] == [("pb", ("W",), 1)]
    # A too prefers the live path (through P, longer) to its own ghost
    assert present_row(a, "D.>")["link"] == "pa"
    held = [x for _, x in w.sent if x.held]
    assert held and all(x.link == "pa" for x in held)  # A told P; nobody passed it on
    w.up("A", "W", "aw")
    w.pump()
    assert a.ghosts() == []
    assert present_row(p, "D.>")["link"] == "pa"
    assert "held" not in present_row(p, "D.>")


def test_the_held_flag_travels_while_no_live_path_is_left() -> None:
    """Chain A - B - C: with B's link to C down, B's entry is the ghost's, A's comes from
    B flagged held (A has nothing better and routes to B, where messages wait); A passes
    the flag on to a node beyond it. The link back up clears it all along."""
    w, a, b, _ = chain()
    d = RoutingEngine("D")
    w.engines["D"] = d
    w.up("D", "A", "da")
    w.pump()
    w.cut("bc")
    w.pump()
    assert present_row(b, "D.>")["link_down"] is True
    assert present_row(a, "D.>")["held"] is True
    assert present_row(d, "D.>")["held"] is True
    assert a.route("D.x", (), None)[1] == [("ab", ("C",), 1)]
    w.up("C", "B", "bc")
    w.pump()
    assert "held" not in present_row(a, "D.>") and "held" not in present_row(d, "D.>")
