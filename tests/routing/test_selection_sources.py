"""Which local interest sources stand behind selectors (routing rule 7): subscriptions
with a selector (``select:TEXT``), and durables that name one (``durable:NAME select:TEXT``);
anything else wants every message. And what the node's local interest tells the engine
for a durable with a selector: sticky and selected at once."""

from __future__ import annotations

from zbroker.node.interest import LocalInterest
from zbroker.routing import LocalSubscribe, LocalUnsubscribe
from zbroker.routing.selection import local_selectors, selected_source


def test_local_selectors_of_mixed_sources() -> None:
    eu = selected_source("durable:eu", "(region = 'EU')")
    assert eu == "durable:eu select:(region = 'EU')"
    assert selected_source("durable:all", None) == "durable:all"
    assert local_selectors([eu]) == frozenset({"(region = 'EU')"})
    assert local_selectors([eu, "select:(qty > 1)"]) == frozenset({"(region = 'EU')", "(qty > 1)"})
    assert local_selectors([eu, "durable:all"]) is None
    assert local_selectors([eu, "clients"]) is None
    assert local_selectors([]) is None
    # a selector's text may hold the separator itself: the name holds no space
    odd = selected_source("durable:x", "(s = ' select:')")
    assert local_selectors([odd]) == frozenset({"(s = ' select:')"})


class _Engine:
    def __init__(self) -> None:
        self.events: list[object] = []

    def handle(self, ev: object) -> None:
        self.events.append(ev)


def test_a_selected_durable_is_sticky_and_selected() -> None:
    engine = _Engine()
    interest = LocalInterest(engine)  # type: ignore[arg-type]  # (a stub: handle() only)
    eu = selected_source("durable:eu", "(region = 'EU')")
    interest.add("ORD.>", eu)
    interest.add("ORD.>", "select:(qty > 1)")  # a live subscriber with a selector
    interest.add("ORD.>", "durable:all")  # a durable without one: everything
    interest.drop("ORD.>", "durable:all")
    interest.drop("ORD.>", eu)  # no durable left: not sticky
    interest.drop("ORD.>", "select:(qty > 1)")
    both = frozenset({"(region = 'EU')", "(qty > 1)"})
    assert engine.events == [
        LocalSubscribe(pattern="ORD.>", sticky=True, selectors=frozenset({"(region = 'EU')"})),
        LocalSubscribe(pattern="ORD.>", sticky=True, selectors=both),
        LocalSubscribe(pattern="ORD.>", sticky=True, selectors=None),
        LocalSubscribe(pattern="ORD.>", sticky=True, selectors=both),
        LocalSubscribe(pattern="ORD.>", sticky=False, selectors=frozenset({"(qty > 1)"})),
        LocalUnsubscribe(pattern="ORD.>"),
    ]
