"""Local interest in the nodes' internal branches of ``$ZB`` is taken only from the
source that makes it (zbroker/node/interest.py, INTERNAL_SOURCES): a queue group's key
from the queue feature, a durable's home key and a shared durable's topic from the
durables feature, a topic host's key from nobody (the engine holds it itself). Anything
else there (a durable or selected subscription on such a pattern) would pass for one of
them, so it never reaches the engine."""

from __future__ import annotations

from zbroker.features.durables import homes, remote
from zbroker.node.interest import INTERNAL_SOURCES, LocalInterest
from zbroker.routing import LocalSubscribe
from zbroker.routing.durable_homes import home_key
from zbroker.routing.keys import group_key


class _Engine:
    def __init__(self) -> None:
        self.patterns: list[str] = []

    def handle(self, ev: object) -> None:
        if isinstance(ev, LocalSubscribe):
            self.patterns.append(ev.pattern)


def test_internal_interest_only_from_its_maker() -> None:
    engine = _Engine()
    interest = LocalInterest(engine)  # type: ignore[arg-type]  # (a stub: handle() only)
    made = [
        (group_key("w", "jobs.>"), "queue"),
        (home_key("billing"), homes.SOURCE + "billing"),
        (remote.sd_topic("A"), remote.SOURCE + ":A"),
    ]
    stray = [
        (group_key("w", "jobs.>"), "durable:d"),
        (group_key("v", "jobs.>"), "select:(a = 1)"),
        (home_key("other"), "clients"),
        (home_key("other"), "durable-homeless"),
        (remote.sd_topic("B"), "retain"),
        ("$ZB.HOST.ORD.>", "queue"),
    ]
    for pattern, source in stray + made:
        interest.add(pattern, source)
    assert engine.patterns == [p for p, _ in made]
    interest.add("$ZB.ADVISORY.>", "clients")  # the node's other $ZB topics: anyone's
    assert engine.patterns[-1] == "$ZB.ADVISORY.>"


def test_the_makers_are_the_features_sources() -> None:
    assert homes.SOURCE == "durable-home:"
    assert remote.SOURCE == "sdr"
    assert INTERNAL_SOURCES["$ZB.DURABLE."] == (homes.SOURCE,)
    assert remote.SOURCE in INTERNAL_SOURCES["$ZB.SD."]
