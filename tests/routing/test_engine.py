"""Unit tests for zbroker.routing.engine.RoutingEngine, driven by hand: what goes out as
adverts (the full table when a link comes up, batched, never repeated), the loop rules on
adverts, one-way links and include/exclude filters.

Two or three engines are wired by :class:`tests.routing.wires.Wires`. Static routes,
conduits, failover and ``route()``: ``tests/routing/test_engine_routes.py``.
"""

from __future__ import annotations

from tests.routing.wires import Send, Wires, best, engines, route
from zbroker.routing import (
    AdvertIn,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    SendAdvert,
)

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
