"""Unit tests for zbroker.routing.engine.RoutingEngine, driven by hand.

Two or three engines are wired by passing each one's :meth:`flush` output to its peer as
:class:`AdvertIn`, exactly as a node or the simulator would.
"""

from __future__ import annotations

from collections.abc import Iterable

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
    return {
        (str(x["pattern"]), str(x["origin"])): (x["link"], x["path"])  # type: ignore[misc]
        for x in e.interest()
    }


def engines(*ids: str) -> list[RoutingEngine]:
    return [RoutingEngine(i) for i in ids]


# -- link up: the full table ----------------------------------------------------------------


def test_local_subscribe_then_link_up_sends_the_full_table() -> None:
    a, b = engines("A", "B")
    a.handle(LocalSubscribe(pattern="X.>"))
    a.handle(LocalSubscribe(pattern="Y"))
    assert a.flush() == []  # no link yet
    assert a.adverts_sent == 0
    w = Wires(a, b)
    w.up("A", "B", "L")
    out = a.flush()
    assert len(out) == 1
    assert out[0].link == "L"
    assert out[0].full is True
    assert sorted(out[0].entries) == [("X.>", "A", ("A",)), ("Y", "A", ("A",))]
    assert a.adverts_sent == 1
    # B's first flush is its (empty) full table
    assert b.flush() == [SendAdvert(link="L", full=True, entries=())]
    b.handle(AdvertIn(link="L", full=out[0].full, entries=out[0].entries))
    assert b.interest() == [
        {"pattern": "X.>", "origin": "A", "path": ["A"], "hops": 1, "link": "L"},
        {"pattern": "Y", "origin": "A", "path": ["A"], "hops": 1, "link": "L"},
    ]
    assert b.entry_count() == 2
    assert b.flush() == []  # split horizon: nothing goes back to A
    assert a.flush() == []


def test_link_up_again_resends_the_full_table() -> None:
    a, b = engines("A", "B")
    w = Wires(a, b)
    w.up("A", "B", "L")
    a.handle(LocalSubscribe(pattern="X"))
    w.pump()
    assert a.flush() == []
    # the same link name comes up again (a replaced link): full table once more
    a.handle(LinkUp(link="L", peer="B"))
    assert a.flush() == [SendAdvert(link="L", full=True, entries=(("X", "A", ("A",)),))]


def test_full_advert_replaces_what_the_link_said_before() -> None:
    (a,) = engines("A")
    a.handle(LinkUp(link="L", peer="B"))
    a.handle(AdvertIn(link="L", full=True, entries=(("X", "B", ("B",)), ("Y", "B", ("B",)))))
    assert sorted(best(a)) == [("X", "B"), ("Y", "B")]
    a.handle(AdvertIn(link="L", full=True, entries=(("Z", "B", ("B",)),)))
    assert best(a) == {("Z", "B"): ("L", ["B"])}
    a.handle(AdvertIn(link="L", full=True, entries=()))
    assert a.interest() == []
    assert a.entry_count() == 0


# -- batching and "never repeat" -----------------------------------------------------------


def test_batching_one_send_per_link_per_flush() -> None:
    a, b, c = engines("A", "B", "C")
    w = Wires(a, b, c)
    w.up("A", "B", "AB")
    w.up("A", "C", "AC")
    w.pump()
    sent_before = a.adverts_sent
    for i in range(100):
        a.handle(LocalSubscribe(pattern=f"T.{i}"))
    out = a.flush()
    assert sorted(x.link for x in out) == ["AB", "AC"]
    for x in out:
        assert x.full is False
        assert len(x.entries) == 100
        assert {e[0] for e in x.entries} == {f"T.{i}" for i in range(100)}
        assert all(e[1] == "A" and e[2] == ("A",) for e in x.entries)
    assert a.adverts_sent == sent_before + 2
    assert a.flush() == []
    # a repeated LocalSubscribe of a pattern already held changes nothing
    a.handle(LocalSubscribe(pattern="T.0"))
    assert a.flush() == []


def test_subscribe_and_unsubscribe_before_flush_sends_nothing() -> None:
    a, b = engines("A", "B")
    w = Wires(a, b)
    w.up("A", "B", "L")
    w.pump()
    before = a.adverts_sent
    a.handle(LocalSubscribe(pattern="X"))
    a.handle(LocalUnsubscribe(pattern="X"))
    assert a.flush() == []  # B never had it: no withdraw either
    assert a.adverts_sent == before
    # once sent, an unsubscribe+resubscribe before flush is no change either
    a.handle(LocalSubscribe(pattern="X"))
    assert a.flush() == [SendAdvert(link="L", full=False, entries=(("X", "A", ("A",)),))]
    a.handle(LocalUnsubscribe(pattern="X"))
    a.handle(LocalSubscribe(pattern="X"))
    assert a.flush() == []
    # a real unsubscribe withdraws exactly once
    a.handle(LocalUnsubscribe(pattern="X"))
    assert a.flush() == [SendAdvert(link="L", full=False, entries=(("X", "A", None),))]
    a.handle(LocalUnsubscribe(pattern="X"))  # not held: no-op
    assert a.flush() == []
    assert a.adverts_sent == before + 2


# -- loop rules on adverts ---------------------------------------------------------------


def test_split_horizon_in_a_chain() -> None:
    a, b, c = engines("A", "B", "C")
    w = Wires(a, b, c)
    w.up("A", "B", "AB")
    w.up("B", "C", "BC")
    c.handle(LocalSubscribe(pattern="X"))
    w.pump()
    assert w.entries_on("C", "BC") == [("X", "C", ("C",))]
    assert w.entries_on("B", "AB") == [("X", "C", ("C", "B"))]
    assert w.entries_on("B", "BC") == []  # never back where it came from
    assert w.entries_on("A", "AB") == []
    assert best(a) == {("X", "C"): ("AB", ["C", "B"])}
    assert best(b) == {("X", "C"): ("BC", ["C"])}
    assert best(c) == {("X", "C"): (None, [])}
    assert (a.entry_count(), b.entry_count(), c.entry_count()) == (1, 1, 1)


def test_never_advertise_to_a_neighbour_on_the_path() -> None:
    (d,) = engines("D")
    for link, peer in (("LB", "B"), ("LC", "C"), ("LE", "E")):
        d.handle(LinkUp(link=link, peer=peer))
    d.flush()
    d.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "C", "B")),)))
    # LB: split horizon; LC: C is on the path; only E hears of it
    assert d.flush() == [
        SendAdvert(link="LE", full=False, entries=(("X", "O", ("O", "C", "B", "D")),))
    ]


def test_own_id_in_path_is_rejected_and_withdraws() -> None:
    (a,) = engines("A")
    a.handle(LinkUp(link="LB", peer="B"))
    a.handle(LinkUp(link="LE", peer="E"))
    a.flush()
    a.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "B")),)))
    assert best(a) == {("X", "O"): ("LB", ["O", "B"])}
    assert a.flush() == [SendAdvert(link="LE", full=False, entries=(("X", "O", ("O", "B", "A")),))]
    # B now offers a path through us: rejected, and what B said before is withdrawn
    a.handle(AdvertIn(link="LB", full=False, entries=(("X", "O", ("O", "A", "B")),)))
    assert a.rejected == {"own_id_in_path": 1}
    assert a.interest() == []
    assert a.entry_count() == 0
    assert a.flush() == [SendAdvert(link="LE", full=False, entries=(("X", "O", None),))]
    # an advert of our own interest (origin = us) is rejected the same way
    a.handle(AdvertIn(link="LB", full=False, entries=(("Y", "A", ("A", "B")),)))
    assert a.rejected == {"own_id_in_path": 2}
    assert a.interest() == []


def test_ttl_spent_adverts_are_rejected() -> None:
    (a,) = engines("A")
    a.handle(LinkUp(link="L", peer="B", options=LinkOptions(ttl=2)))
    a.handle(AdvertIn(link="L", full=False, entries=(("X", "O", ("O", "P", "B")),)))
    assert a.rejected == {"ttl_spent": 1}
    assert a.interest() == []
    a.handle(AdvertIn(link="L", full=False, entries=(("X", "O", ("O", "B")),)))
    assert a.rejected == {"ttl_spent": 1}
    assert best(a) == {("X", "O"): ("L", ["O", "B"])}
    # a later too-long path for the same key withdraws the accepted one
    a.handle(AdvertIn(link="L", full=False, entries=(("X", "O", ("O", "Q", "B")),)))
    assert a.rejected == {"ttl_spent": 2}
    assert a.interest() == []


def test_ttl_limits_what_is_advertised() -> None:
    (b,) = engines("B")
    b.handle(LinkUp(link="in", peer="C"))
    b.handle(LinkUp(link="out", peer="A", options=LinkOptions(ttl=2)))
    b.flush()
    b.handle(
        AdvertIn(
            link="in",
            full=False,
            entries=(("NEAR", "C", ("C",)), ("FAR", "D", ("D", "C"))),
        )
    )
    # (C, B) is 2 hops: fits; (D, C, B) is 3: not over a ttl-2 link
    assert b.flush() == [SendAdvert(link="out", full=False, entries=(("NEAR", "C", ("C", "B")),))]


def test_malformed_paths_and_unknown_links_are_rejected() -> None:
    (a,) = engines("A")
    a.handle(LinkUp(link="L", peer="B"))
    a.handle(
        AdvertIn(
            link="L",
            full=False,
            entries=(
                ("X", "O", ()),  # empty
                ("X", "O", ("P", "B")),  # does not start at the origin
                ("X", "O", ("O", "C")),  # does not end at the neighbour
            ),
        )
    )
    a.handle(AdvertIn(link="nope", full=False, entries=(("X", "B", ("B",)),)))
    assert a.rejected == {"bad_path": 3, "unknown_link": 1}
    assert a.interest() == []


# -- one-way links ------------------------------------------------------------------------


def test_one_way_link_adverts_and_messages() -> None:
    d, a = engines("D", "A")  # D dials A; messages flow D -> A only
    w = Wires(d, a)
    w.up("D", "A", "L", duplex=False)
    d.handle(LocalSubscribe(pattern="X"))
    a.handle(LocalSubscribe(pattern="Y"))
    w.pump()
    # the dialer never advertises interest over it (A cannot send to D) ...
    assert w.entries_on("D", "L") == []
    assert [x for s, x in w.sent if s == "D"] == [SendAdvert(link="L", full=True, entries=())]
    # ... the acceptor does
    assert w.entries_on("A", "L") == [("Y", "A", ("A",))]
    assert a.interest() == [{"pattern": "Y", "origin": "A", "path": [], "hops": 0, "link": None}]
    assert route(d, "Y") == (frozenset(), [("L", ("A",), 1)])
    assert route(a, "X") == (frozenset(), [])
    # even if A held interest over the link, it can never send over it
    a.handle(AdvertIn(link="L", full=False, entries=(("X", "D", ("D",)),)))
    assert best(a)[("X", "D")] == ("L", ["D"])
    assert route(a, "X") == (frozenset(), [])
    a.handle(LinkUp(link="S", peer="S", options=LinkOptions(static=("X",))))
    assert route(a, "X") == (frozenset(), [("S", None, 1)])
    a.handle(LinkDown(link="S"))
    d.handle(LocalSubscribe(pattern="Z"))
    d.handle(LocalUnsubscribe(pattern="X"))
    assert d.flush() == []


# -- filters ------------------------------------------------------------------------------

PRICE = LinkOptions(include=("PRICE.STOCK.>",), exclude=("PRICE.STOCK.NYSE.*",))


def test_include_exclude_shape_adverts_and_routes() -> None:
    a, b = engines("A", "B")
    w = Wires(a, b)
    w.up("A", "B", "L", options=PRICE)
    for p in ("PRICE.>", "PRICE.STOCK.NYSE.*", "BOND.>"):
        b.handle(LocalSubscribe(pattern=p))
    w.pump()
    assert w.entries_on("B", "L") == [("PRICE.>", "B", ("B",))]
    assert sorted(best(a)) == [("PRICE.>", "B")]
    crossing = {
        "PRICE.STOCK.NASDAQ.AAPL": True,
        "PRICE.STOCK.NYSE.IBM.X": True,
        "PRICE.STOCK.NYSE": True,
        "PRICE.STOCK.NYSE.IBM": False,
        "PRICE.BOND.X": False,
        "PRICE.STOCK": False,
    }
    for topic, crosses in crossing.items():
        expected: list[Send] = [("L", ("B",), 1)] if crosses else []
        assert route(a, topic) == (frozenset(), expected), topic
    # B delivers whatever reaches it; filters only guard the link
    assert b.local_matches("PRICE.STOCK.NYSE.IBM") == frozenset({"PRICE.>", "PRICE.STOCK.NYSE.*"})


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
