"""Unit tests for the parts of the routing engine on their own: the interest table
(rules 1, 2, 6), propagation (rule 3) and the router's caches (rules 4, 5)."""

from __future__ import annotations

import time
from types import MethodType

from zbroker.routing import (
    AdvertIn,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    RoutingEngine,
    propagation,
)
from zbroker.routing.routes import Router
from zbroker.routing.table import EngineLink, InterestTable


def table_with(*links: tuple[str, str]) -> InterestTable:
    t = InterestTable("B")
    for link_id, peer in links:
        t.links[link_id] = EngineLink(LinkUp(link=link_id, peer=peer))
    return t


# -- the interest table ---------------------------------------------------------------------


def test_accept_reports_only_keys_whose_best_may_change() -> None:
    t = table_with(("l1", "P1"), ("l2", "P2"))
    assert t.accept(AdvertIn(link="l1", full=False, entries=(("X", "O", ("O", "P1")),))) == {
        ("X", "O")
    }
    t.set_best(("X", "O"), None, t.select(("X", "O")))
    # a longer alternative over another link loses: nothing to reselect
    longer = ("X", "O", ("O", "Q", "P2"))
    assert t.accept(AdvertIn(link="l2", full=False, entries=(longer,))) == set()
    # withdrawing that non-best alternative changes nothing either
    assert t.accept(AdvertIn(link="l2", full=False, entries=(("X", "O", None),))) == set()


def test_accept_rejects_and_counts_bad_paths() -> None:
    t = table_with(("l1", "P1"))
    own = ("X", "O", ("O", "B", "P1"))
    wrong_end = ("Y", "O", ("O", "Q"))
    assert t.accept(AdvertIn(link="l1", full=False, entries=(own, wrong_end))) == set()
    assert t.rejected == {"own_id_in_path": 1, "bad_path": 1}
    assert t.accept(AdvertIn(link="nope", full=False, entries=())) == set()
    assert t.rejected["unknown_link"] == 1


def test_select_prefers_live_short_then_lowest_peer_and_link() -> None:
    t = table_with(("l2", "P1"), ("l1", "P1"), ("l0", "P2"))
    for link_id, path in (("l2", ("O", "P1")), ("l1", ("O", "P1")), ("l0", ("O", "P2"))):
        t.links[link_id].adj_in[("X", "O")] = path
    assert t.select(("X", "O")) == ("l1", ("O", "P1"))
    t.links["l1"].up = False  # a ghost ranks below every live path
    assert t.select(("X", "O")) == ("l2", ("O", "P1"))


def test_a_ghost_keeps_only_its_sticky_entries() -> None:
    t = table_with(("l1", "P1"))
    link = t.links["l1"]
    link.adj_in = {("X", "O"): ("O", "P1"), ("Y", "O"): ("O", "P1")}
    link.sticky = {("X", "O"), ("Z", "O")}
    kept = link.sticky_held()
    assert kept == {("X", "O"): ("O", "P1")}
    link.become_ghost(kept)
    assert (link.up, link.adj_in, link.full_pending) == (False, kept, False)
    assert t.ghosts() == ["l1"]
    assert t.sticky_entries("l1") == [("X", "O", ("O", "P1"))]


# -- propagation ----------------------------------------------------------------------------


def test_flush_sends_changes_only_and_never_repeats() -> None:
    link = EngineLink(LinkUp(link="l1", peer="P1"))
    links = {"l1": link}
    assert propagation.flush(links)[0].full is True  # a new link owes its full table
    assert propagation.flush(links) == []
    key = ("X", "B")
    propagation.advertise(links, key, (None, ()), ("B",), sticky=True)
    (out,) = propagation.flush(links)
    assert (out.full, out.entries, out.sticky) == (False, (("X", "B", ("B",)),), frozenset({key}))
    propagation.advertise(links, key, (None, ()), ("B",), sticky=True)
    assert propagation.flush(links) == []  # the same as last sent
    propagation.withdraw(links, key)
    assert propagation.flush(links)[0].entries == (("X", "B", None),)


def test_offer_table_skips_split_horizon_and_filtered_patterns() -> None:
    t = table_with(("l1", "P1"))
    t.best = {("X", "O"): ("l2", ("O", "P2")), ("Y.a", "B"): (None, ()), ("Z", "B"): (None, ())}
    new = EngineLink(LinkUp(link="l2", peer="P2", options=LinkOptions(exclude=("Z",))))
    propagation.offer_table(new, t)
    assert new.pending == {("Y.a", "B"): (("B",), False, None, False)}
    one_way = EngineLink(LinkUp(link="l3", peer="P3", can_receive=False))
    propagation.offer_table(one_way, t)
    assert one_way.pending == {}


# -- the router -----------------------------------------------------------------------------


def test_route_is_the_routers_own_method_on_the_hot_path() -> None:
    e = RoutingEngine("B")
    # no wrapper between a node and Router.route: the engine binds it
    route, matches = e.route, e.local_matches
    assert isinstance(route, MethodType) and route.__func__ is Router.route
    assert isinstance(matches, MethodType) and matches.__func__ is Router.local_matches


def test_routes_are_cached_until_the_table_changes() -> None:
    e = RoutingEngine("B")
    e.handle(LinkUp(link="l1", peer="P1"))
    e.handle(AdvertIn(link="l1", full=True, entries=(("X.>", "O", ("O", "P1")),)))
    first = e.route("X.a", (), None)
    assert first == (frozenset(), [("l1", ("O",), 1)])
    assert e.route("X.a", (), None) is first
    e.handle(LocalSubscribe(pattern="X.>"))
    again = e.route("X.a", (), None)
    assert again is not first
    assert again == (frozenset({"X.>"}), [("l1", ("O",), 1)])


def test_route_cache_starts_over_at_its_limit() -> None:
    e = RoutingEngine("B", cache_size=2)
    e.handle(LocalSubscribe(pattern=">"))
    a = e.route("A", (), None)
    e.route("C", (), None)
    e.route("D", (), None)  # a third key: the cache started over
    assert e.route("A", (), None) is not a


def test_a_change_evicts_only_the_plans_and_routes_its_pattern_matches() -> None:
    """Issue 18, item 9: interest in X.> changes nothing for Y.a, whose cached route
    stays; X.a's is recomputed (before, every change cleared both caches)."""
    e = RoutingEngine("B")
    e.handle(LinkUp(link="l1", peer="P1"))
    e.handle(AdvertIn(link="l1", full=True, entries=(("Y.>", "O", ("O", "P1")),)))
    y = e.route("Y.a", (), None)
    x = e.route("X.a", (), None)
    assert x == (frozenset(), [])
    e.handle(LocalSubscribe(pattern="X.>"))
    assert e.route("Y.a", (), None) is y
    assert e.route("X.a", (), None) == (frozenset({"X.>"}), [])
    e.handle(AdvertIn(link="l1", full=False, entries=(("X.*", "O", ("O", "P1")),)))
    assert e.route("Y.a", (), None) is y
    assert e.route("X.a", (), None) == (frozenset({"X.>"}), [("l1", ("O",), 1)])
    # a relay's route (another path and targets) of the same topic goes with its plan
    e.handle(LinkUp(link="l2", peer="P2"))  # links change: everything starts over
    relay = e.route("X.a", ("P2",), ("O",))
    assert relay == (frozenset({"X.>"}), [("l1", ("O",), 1)])
    y = e.route("Y.a", (), None)
    e.handle(AdvertIn(link="l1", full=False, entries=(("X.*", "O", None),)))
    assert e.route("X.a", ("P2",), ("O",)) == (frozenset({"X.>"}), [])
    assert e.route("Y.a", (), None) is y


def test_interest_changes_against_warm_caches_do_not_scan_them() -> None:
    """20,000 local subscribes and as many remote entries, 4,000 of each covering one of
    the 4,000 topics routed just before: before issue 18 item 9 every change scanned
    both match caches and cleared the route cache; now it costs what it touches."""
    e = RoutingEngine("B")
    e.handle(LinkUp(link="l1", peer="P1"))
    e.handle(LinkUp(link="l2", peer="P2"))
    topics = [f"C{k % 100}.{k}.tick" for k in range(4_000)]
    e.handle(AdvertIn(link="l1", full=True, entries=tuple((t, "O", ("O", "P1")) for t in topics)))
    e.flush()
    for t in topics:
        e.route(t, (), None)
    start = time.perf_counter()
    for i in range(20_000):
        e.handle(LocalSubscribe(pattern=f"C{i % 100}.{i}.>"))
    e.flush()
    entries = tuple((f"C{i % 100}.{i}.*", "O", ("O", "P1")) for i in range(20_000))
    e.handle(AdvertIn(link="l1", full=False, entries=entries))
    e.flush()
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, elapsed
    assert len(e.local_patterns) == 20_000
    assert e.route(topics[0], (), None) == (frozenset({"C0.0.>"}), [("l1", ("O",), 1)])
