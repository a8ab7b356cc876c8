"""Detours (routing/detours.py): a copy's target whose best entry here leads back along
the copy's path goes by another entry instead of being dropped.

The case the fault mesh met, by hand-driven engines in a square N1-N3, N3-N4, N4-N5,
N5-N1 with a durable (sticky) subscriber on N4: N4 stops, so N3 and N5 keep ghosts of
their links to it; N1 sends N3 a copy for N4 (N3's ghost, the tie-break); N4 comes back
on N5's link first, and N3 now prefers N4's live entry through N1, on the copy's path.
"""

from __future__ import annotations

from zbroker.routing import LinkDown, LinkUp, LocalSubscribe, RoutingEngine
from zbroker.routing.detours import unserved

from .test_sticky import StickyWires


def square() -> tuple[StickyWires, dict[str, RoutingEngine]]:
    engines = {n: RoutingEngine(n) for n in ("N1", "N3", "N4", "N5")}
    w = StickyWires(*engines.values())
    w.up("N3", "N1", "n3-n1")
    w.up("N4", "N3", "n4-n3")
    w.up("N5", "N4", "n5-n4")
    w.up("N5", "N1", "n5-n1")
    engines["N4"].handle(LocalSubscribe(pattern="F.>", sticky=True))
    w.pump()
    return w, engines


def n4_comes_back_by_n5_first() -> tuple[StickyWires, dict[str, RoutingEngine]]:
    w, e = square()
    w.cut("n4-n3")
    w.cut("n5-n4")
    w.pump()
    # N1 routes N4's copies by N3 (both its entries are held: the tie-break)
    assert e["N1"].route("F.x", (), None)[1] == [("n3-n1", ("N4",), 1)]
    # N4 is back on N5's link before N3's: N5's entry is live again, and N3 learns N4's
    # live way through N1 (N1 - N5 - N4) while its own direct link is still a ghost
    w.ends["n5-n4"] = ("N5", "N4")
    w.engines["N5"].handle(LinkUp(link="n5-n4", peer="N4", can_send=True, can_receive=True))
    w.engines["N4"].handle(LinkUp(link="n5-n4", peer="N5", can_send=True, can_receive=True))
    w.pump()
    assert e["N1"].route("F.x", (), None)[1] == [("n5-n1", ("N4",), 1)]
    return w, e


def test_a_copy_for_a_target_best_reached_through_its_sender_takes_the_other_entry() -> None:
    _, e = n4_comes_back_by_n5_first()
    n4_row = [r for r in e["N3"].interest() if r["origin"] == "N4"]
    assert [(r["link"], r["path"]) for r in n4_row] == [("n3-n1", ["N4", "N5", "N1"])]
    # the copy N1 sent before it learned of N5's way: N3 queues it toward its ghost of
    # the direct link (a persistent message waits there until N4 is back)
    local, sends = e["N3"].route("F.x", ("N1",), ("N4",))
    assert (local, sends) == (frozenset(), [("n4-n3", ("N4",), 1)])


def test_a_detour_never_crosses_a_node_of_the_path() -> None:
    w, e = n4_comes_back_by_n5_first()
    # N2 joins N1 and N3: N3 hears of N4 through N2 as well, by way of N1
    e["N2"] = w.engines["N2"] = RoutingEngine("N2")
    w.up("N2", "N1", "n2-n1")
    w.up("N3", "N2", "n3-n2")
    w.pump()
    e["N3"].handle(LinkDown(link="n4-n3"))  # the ghost expired
    w.pump()
    # N2's entry of N4 leads through N1, which the copy crossed: no way is left
    assert [r["path"] for r in e["N3"].interest() if r["origin"] == "N4"] == [["N4", "N5", "N1"]]
    assert e["N3"].route("F.x", ("N1",), ("N4",)) == (frozenset(), [])


def test_copies_without_targets_and_local_publishes_are_not_detoured() -> None:
    _, e = n4_comes_back_by_n5_first()
    # a local publish: N3's best entry, through N1
    assert e["N3"].route("F.x", (), None)[1] == [("n3-n1", ("N4",), 1)]
    # a copy that names no targets (a static push) leaves out what its path holds
    assert e["N3"].route("F.x", ("N1",), None)[1] == []


def test_the_detour_ends_when_the_entries_change() -> None:
    w, e = n4_comes_back_by_n5_first()
    assert e["N3"].route("F.x", ("N1",), ("N4",))[1] == [("n4-n3", ("N4",), 1)]
    w.ends["n4-n3"] = ("N4", "N3")
    w.engines["N4"].handle(LinkUp(link="n4-n3", peer="N3", can_send=True, can_receive=True))
    w.engines["N3"].handle(LinkUp(link="n4-n3", peer="N4", can_send=True, can_receive=True))
    w.pump()
    # the direct link is live and best again: the same copy goes by it, as the best entry
    assert e["N3"].route("F.x", ("N1",), ("N4",))[1] == [("n4-n3", ("N4",), 1)]
    assert e["N3"].route("F.x", (), None)[1] == [("n4-n3", ("N4",), 1)]


def test_what_a_copy_loses_here_is_named() -> None:
    _, e = n4_comes_back_by_n5_first()
    e["N3"].handle(LinkDown(link="n4-n3"))  # the ghost expired: no way to N4 but by N1
    targets = ("N3", "N4")
    assert unserved(targets, e["N3"].route("F.x", ("N1",), targets)[1], "N3") == ["N4"]
    assert unserved(("N4",), [("l", ("N4", "N9"), 1)], "N3") == []
    assert unserved(("N4",), [("l", None, 1)], "N3") == []  # a static push: all of them
    assert unserved(("^H", "N4"), [], "N3") == []  # on its way to a host: no origins


def square_with_n2() -> tuple[StickyWires, dict[str, RoutingEngine]]:
    """The square, and N2 joined to N1 and N3: N3 hears of N4 directly, through N1 and
    through N2 (whose only way to N4 leads through N1)."""
    w, e = square()
    e["N2"] = w.engines["N2"] = RoutingEngine("N2")
    w.up("N2", "N1", "n2-n1")
    w.up("N3", "N2", "n3-n2")
    w.pump()
    return w, e


def test_a_best_entry_that_crosses_the_path_further_on_takes_the_other_entry() -> None:
    # the fault mesh's case: N3's links to N4 and N1 are down (ghosts, held) and its link
    # to N2 is up, so N3's best entry of N4 is N2's live one, which leads through N1
    w, e = square_with_n2()
    w.cut("n4-n3")
    w.cut("n3-n1")
    w.pump()
    n4_rows = {r["link"]: r["path"] for r in e["N3"].interest() if r["origin"] == "N4"}
    assert n4_rows["n3-n2"] == ["N4", "N5", "N1", "N2"]
    assert e["N3"].route("F.x", (), None)[1] == [("n3-n2", ("N4",), 1)]  # its own publish
    # a copy N1 sent for N4: by N2 it could only go back through N1, and N2 would drop
    # it; it waits on the ghost of the direct link instead (store-and-forward queues it)
    local, sends = e["N3"].route("F.x", ("N1",), ("N4",))
    assert (local, sends) == (frozenset(), [("n4-n3", ("N4",), 1)])
    # N2 itself has no way for such a copy: both its links lead back along the path
    assert e["N2"].route("F.x", ("N1", "N3"), ("N4",)) == (frozenset(), [])


def test_a_crossing_entry_with_no_other_way_keeps_its_link() -> None:
    w, e = square_with_n2()
    w.cut("n3-n1")
    w.pump()
    e["N3"].handle(LinkDown(link="n4-n3"))  # no ghost of the direct link: N2's is all
    w.pump()
    # nothing better exists: the copy goes where it went before (N2 counts what it
    # cannot route), not nowhere
    assert e["N3"].route("F.x", ("N1",), ("N4",))[1] == [("n3-n2", ("N4",), 1)]


def test_a_target_whose_best_entry_avoids_the_path_is_not_moved() -> None:
    _, e = square_with_n2()
    # all links up: N3's best entry of N4 is the direct one, which crosses nothing
    assert e["N3"].route("F.x", ("N1",), ("N4",))[1] == [("n4-n3", ("N4",), 1)]
    assert e["N3"].route("F.x", ("N2",), ("N4",))[1] == [("n4-n3", ("N4",), 1)]
