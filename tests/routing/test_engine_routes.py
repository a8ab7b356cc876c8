"""Unit tests for zbroker.routing.engine.RoutingEngine, driven by hand: where messages
go. Static routes, conduits, failover and tie-breaks between paths, ``route()`` (next hops,
targets, the path and TTL rules) and the interest table.

Two or three engines are wired by :class:`tests.routing.wires.Wires`.
"""

from __future__ import annotations

from tests.routing.wires import Wires, best, engines, route
from zbroker.routing import (
    AdvertIn,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    RoutingEngine,
    SendAdvert,
)

# -- static routes ------------------------------------------------------------------------


def test_static_route_without_interest_carries_no_targets() -> None:
    a, b, c = engines("A", "B", "C")
    w = Wires(a, b, c)
    w.up("A", "B", "AB", options=LinkOptions(static=("ALERT.>",)))
    w.up("B", "C", "BC")
    c.handle(LocalSubscribe(pattern="ALERT.FIRE"))
    c.handle(LocalSubscribe(pattern="OTHER"))
    w.pump()
    # the static link is used for matching topics only, and a static push carries no
    # targets even where interest exists: the receiver decides from its own table
    assert route(a, "ALERT.FIRE") == (frozenset(), [("AB", None, 1)])
    assert route(a, "OTHER") == (frozenset(), [("AB", ("C",), 1)])
    assert route(a, "ALERT.WATER") == (frozenset(), [("AB", None, 1)])
    assert route(a, "ALERT") == (frozenset(), [])
    # the receiver computes targets from its own table
    assert route(b, "ALERT.FIRE", ("A",), None) == (frozenset(), [("BC", ("C",), 1)])
    assert route(b, "ALERT.WATER", ("A",), None) == (frozenset(), [])
    # and never pushes it back to a neighbour on the path (B's end is static too)
    assert route(b, "ALERT.WATER", (), None) == (frozenset(), [("AB", None, 1)])
    assert route(b, "ALERT.WATER", ("X", "A"), None) == (frozenset(), [])


def test_static_copy_never_targets_an_origin_on_its_path() -> None:
    (b,) = engines("B")
    b.handle(LinkUp(link="LA", peer="A", options=LinkOptions(static=("ALERT.>",))))
    b.handle(LinkUp(link="LC", peer="C"))
    b.handle(AdvertIn(link="LC", full=False, entries=(("ALERT.>", "O", ("O", "C")),)))
    b.handle(AdvertIn(link="LC", full=False, entries=(("ALERT.>", "P", ("P", "C")),)))
    # the copy came from O (via A, pushed statically): only P is still a target
    assert route(b, "ALERT.X", ("O", "A"), None) == (frozenset(), [("LC", ("P",), 1)])
    assert route(b, "ALERT.X", ("A",), None) == (frozenset(), [("LC", ("O", "P"), 1)])


# -- conduit ------------------------------------------------------------------------------


def _conduit_net(conduit: bool) -> RoutingEngine:
    a, b, c = engines("A", "B", "C")
    w = Wires(a, b, c)
    w.up("A", "B", "AB", options=LinkOptions(conduit=conduit))
    w.up("B", "C", "BC")
    for p in ("T.>", "T.*", "T.X"):  # three patterns of B that match T.X
        b.handle(LocalSubscribe(pattern=p))
    b.handle(LocalSubscribe(pattern="U"))  # does not match
    for p in ("T.X", ">"):  # two of C
        c.handle(LocalSubscribe(pattern=p))
    w.pump()
    assert len(a.interest()) == 6
    return a


def test_conduit_off_sends_one_copy_per_matching_entry() -> None:
    a = _conduit_net(conduit=False)
    assert route(a, "T.X") == (frozenset(), [("AB", ("B", "C"), 5)])
    assert route(a, "T.Y") == (frozenset(), [("AB", ("B", "C"), 3)])  # T.>, T.*, >
    assert route(a, "T.X", ("P",), ("C",)) == (frozenset(), [("AB", ("C",), 2)])
    assert route(a, "U") == (frozenset(), [("AB", ("B", "C"), 2)])
    assert route(a, "V.W") == (frozenset(), [("AB", ("C",), 1)])


def test_conduit_on_sends_one_copy_per_link() -> None:
    a = _conduit_net(conduit=True)
    assert route(a, "T.X") == (frozenset(), [("AB", ("B", "C"), 1)])
    assert route(a, "T.Y") == (frozenset(), [("AB", ("B", "C"), 1)])
    assert route(a, "V.W") == (frozenset(), [("AB", ("C",), 1)])


# -- failover and tie-break -----------------------------------------------------------------


def test_link_down_withdraws_and_fails_over_to_the_next_best() -> None:
    (a,) = engines("A")
    for link, peer in (("LB", "B"), ("LC", "C"), ("LE", "E")):
        a.handle(LinkUp(link=link, peer=peer))
    a.flush()
    a.handle(AdvertIn(link="LC", full=False, entries=(("X", "O", ("O", "D", "C")),)))
    a.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "B")),)))
    assert best(a) == {("X", "O"): ("LB", ["O", "B"])}
    assert a.entry_count() == 2  # the next best is kept
    out = {x.link: x.entries for x in a.flush()}
    assert out == {"LC": (("X", "O", ("O", "B", "A")),), "LE": (("X", "O", ("O", "B", "A")),)}
    assert route(a, "X") == (frozenset(), [("LB", ("O",), 1)])

    a.handle(LinkDown(link="LB"))
    assert best(a) == {("X", "O"): ("LC", ["O", "D", "C"])}
    assert a.entry_count() == 1
    out = {x.link: x.entries for x in a.flush()}
    # LC now holds the best: withdrawn there (split horizon); LE hears the new path
    assert out == {"LC": (("X", "O", None),), "LE": (("X", "O", ("O", "D", "C", "A")),)}
    assert route(a, "X") == (frozenset(), [("LC", ("O",), 1)])

    a.handle(LinkDown(link="LC"))
    assert a.interest() == []
    assert a.entry_count() == 0
    assert a.flush() == [SendAdvert(link="LE", full=False, entries=(("X", "O", None),))]
    assert route(a, "X") == (frozenset(), [])
    a.handle(LinkDown(link="LC"))  # unknown: no-op
    assert a.flush() == []


def test_alternative_paths_change_without_moving_the_best() -> None:
    (a,) = engines("A")
    for link, peer in (("LB", "B"), ("LC", "C"), ("LE", "E")):
        a.handle(LinkUp(link=link, peer=peer))
    a.flush()
    a.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "B")),)))
    a.handle(AdvertIn(link="LC", full=False, entries=(("X", "O", ("O", "P", "C")),)))
    assert best(a) == {("X", "O"): ("LB", ["O", "B"])}
    a.flush()
    # a losing alternative changes or goes: the best and the adverts stay as they are
    a.handle(AdvertIn(link="LC", full=False, entries=(("X", "O", ("O", "Q", "R", "C")),)))
    assert best(a) == {("X", "O"): ("LB", ["O", "B"])}
    assert a.entry_count() == 2
    a.handle(AdvertIn(link="LC", full=False, entries=(("X", "O", None),)))
    assert a.entry_count() == 1
    assert a.flush() == []
    # an alternative that now wins takes over
    a.handle(AdvertIn(link="LC", full=False, entries=(("X", "O", ("O", "C")),)))
    assert best(a) == {("X", "O"): ("LB", ["O", "B"])}  # same length: B < C
    a.handle(AdvertIn(link="LE", full=False, entries=(("X", "O", ("O", "E")),)))
    assert best(a) == {("X", "O"): ("LB", ["O", "B"])}  # same length: B < E
    # the best link's own path grows: the best moves to the next one
    a.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "S", "T", "B")),)))
    assert best(a) == {("X", "O"): ("LC", ["O", "C"])}
    out = {x.link: x.entries for x in a.flush()}
    assert out == {
        "LB": (("X", "O", ("O", "C", "A")),),
        "LC": (("X", "O", None),),
        "LE": (("X", "O", ("O", "C", "A")),),
    }
    # a full table from LC without the key: withdrawn, LE's path is next
    a.handle(AdvertIn(link="LC", full=True, entries=()))
    assert best(a) == {("X", "O"): ("LE", ["O", "E"])}
    # a rejected path from a losing link only drops that link's entry
    a.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "A", "B")),)))
    assert a.rejected == {"own_id_in_path": 1}
    assert best(a) == {("X", "O"): ("LE", ["O", "E"])}
    assert a.entry_count() == 1


def test_tie_break_lowest_peer_then_link() -> None:
    (a,) = engines("A")
    # equal-length paths, heard in an order that is not the preferred one
    for link, peer in (("z", "C"), ("y", "B"), ("x", "B"), ("w", "D")):
        a.handle(LinkUp(link=link, peer=peer))
    for link, peer in (("z", "C"), ("y", "B"), ("w", "D"), ("x", "B")):
        a.handle(AdvertIn(link=link, full=False, entries=(("X", "O", ("O", "M", peer)),)))
    # a shorter path via the highest peer would win, but D's is as long as the others
    assert best(a)[("X", "O")] == ("x", ["O", "M", "B"])
    assert route(a, "X") == (frozenset(), [("x", ("O",), 1)])
    a.handle(LinkDown(link="x"))
    assert best(a)[("X", "O")] == ("y", ["O", "M", "B"])
    a.handle(LinkDown(link="y"))
    assert best(a)[("X", "O")] == ("z", ["O", "M", "C"])
    # shorter beats lower
    a.handle(AdvertIn(link="w", full=False, entries=(("X", "O", ("O", "D")),)))
    assert best(a)[("X", "O")] == ("w", ["O", "D"])


def test_tie_break_is_the_same_for_every_origin() -> None:
    a, b, c, d = engines("A", "B", "C", "D")
    w = Wires(a, b, c, d)
    w.up("A", "C", "AC")
    w.up("A", "B", "AB")
    w.up("C", "D", "CD")
    w.up("B", "D", "BD")
    d.handle(LocalSubscribe(pattern="X"))
    w.pump()
    assert best(a) == {("X", "D"): ("AB", ["D", "B"])}
    assert a.entry_count() == 2
    assert route(a, "X") == (frozenset(), [("AB", ("D",), 1)])


# -- route() ------------------------------------------------------------------------------


def _star() -> tuple[RoutingEngine, Wires]:
    a, b, c, d = engines("A", "B", "C", "D")
    w = Wires(a, b, c, d)
    w.up("A", "B", "AB")
    w.up("A", "C", "AC")
    w.up("C", "D", "CD")
    for e in (a, b, c, d):
        e.handle(LocalSubscribe(pattern="X.>"))
    w.pump()
    return a, w


def test_route_local_publish_one_copy_per_next_hop() -> None:
    a, _ = _star()
    assert route(a, "X.1") == (frozenset({"X.>"}), [("AB", ("B",), 1), ("AC", ("C", "D"), 1)])
    assert route(a, "Y") == (frozenset(), [])


def test_route_with_targets_forwards_only_toward_them() -> None:
    a, _ = _star()
    assert route(a, "X.1", ("P",), ("D",)) == (frozenset({"X.>"}), [("AC", ("D",), 1)])
    assert route(a, "X.1", ("P",), ("B", "D")) == (
        frozenset({"X.>"}),
        [("AB", ("B",), 1), ("AC", ("D",), 1)],
    )
    # ourselves and unknown origins are not forwarded to
    assert route(a, "X.1", ("P",), ("A", "Z")) == (frozenset({"X.>"}), [])
    assert route(a, "X.1", ("P",), ()) == (frozenset({"X.>"}), [])


def test_route_never_sends_to_a_neighbour_on_the_path() -> None:
    a, _ = _star()
    # arrived from B: computed targets skip B, and B's link is never used
    assert route(a, "X.1", ("B",), None) == (frozenset({"X.>"}), [("AC", ("C", "D"), 1)])
    assert route(a, "X.1", ("B",), ("B", "C")) == (frozenset({"X.>"}), [("AC", ("C",), 1)])
    assert route(a, "X.1", ("C",), ("D",)) == (frozenset({"X.>"}), [])


def test_route_respects_the_ttl_of_each_link() -> None:
    a, b = engines("A", "B")
    w = Wires(a, b)
    w.up("A", "B", "L", options=LinkOptions(ttl=2))
    b.handle(LocalSubscribe(pattern="X"))
    w.pump()
    assert route(a, "X") == (frozenset(), [("L", ("B",), 1)])  # hop 1
    assert route(a, "X", ("P",), ("B",)) == (frozenset(), [("L", ("B",), 1)])  # hop 2
    assert route(a, "X", ("P", "Q"), ("B",)) == (frozenset(), [])  # hop 3 > 2


def test_interest_output_shape() -> None:
    a, w = _star()
    a.handle(LocalSubscribe(pattern="A.ONLY"))
    w.pump()
    assert a.interest() == [
        {"pattern": "A.ONLY", "origin": "A", "path": [], "hops": 0, "link": None},
        {"pattern": "X.>", "origin": "A", "path": [], "hops": 0, "link": None},
        {"pattern": "X.>", "origin": "B", "path": ["B"], "hops": 1, "link": "AB"},
        {"pattern": "X.>", "origin": "C", "path": ["C"], "hops": 1, "link": "AC"},
        {"pattern": "X.>", "origin": "D", "path": ["D", "C"], "hops": 2, "link": "AC"},
    ]
    assert a.local_patterns == frozenset({"A.ONLY", "X.>"})
    assert a.local_matches("X.Y") == frozenset({"X.>"})
    # 2 local + B, C, D via the links that heard them
    assert a.entry_count() == 5
    d = w.engines["D"]
    assert [(x["pattern"], x["origin"], x["path"], x["link"]) for x in d.interest()] == [
        ("A.ONLY", "A", ["A", "C"], "CD"),
        ("X.>", "A", ["A", "C"], "CD"),
        ("X.>", "B", ["B", "A", "C"], "CD"),
        ("X.>", "C", ["C"], "CD"),
        ("X.>", "D", [], None),
    ]
    assert all(isinstance(x["path"], list) for x in d.interest())
    assert all(set(x) == {"pattern", "origin", "path", "hops", "link"} for x in d.interest())


def test_unsubscribe_everywhere_empties_every_table() -> None:
    _, w = _star()
    for e in w.engines.values():
        e.handle(LocalUnsubscribe(pattern="X.>"))
    w.pump()
    for e in w.engines.values():
        assert e.interest() == []
        assert e.entry_count() == 0
        assert route(e, "X.1") == (frozenset(), [])
