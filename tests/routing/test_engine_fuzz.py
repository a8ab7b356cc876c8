"""The routing engine accepts any well-typed event sequence (issue 18, item 10).

A node hands the engine every ADVERT frame the codec accepts, so the engine must take any
mix of entries and withdrawals, repeated keys, bad paths and stray sticky flags, among
link ups and downs and local (un)subscriptions, without raising, and end with exactly the
table the events imply. The model below replays the rules of
:mod:`zbroker.routing.engine` on plain dicts; after every step the engine's best entries,
its remote and local match tries, what it last advertised on each link and its cached
routes must equal what the model and an uncached router compute.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from zbroker import topics
from zbroker.routing import (
    AdvertIn,
    LinkDown,
    LinkOptions,
    LinkUp,
    LocalSubscribe,
    LocalUnsubscribe,
    RoutingEngine,
)
from zbroker.routing.loops import path_holds, ttl_spent
from zbroker.routing.routes import Router

ME = "A"
Key = tuple[str, str]
Path = tuple[str, ...]


def test_advert_and_withdraw_of_one_key_in_one_frame() -> None:
    """The frame of the report: advertise and withdraw P, withdraw Q. Before the fix the
    engine raised KeyError on P and left Q as a ghost in its table."""
    e = RoutingEngine(ME)
    e.handle(LinkUp(link="ab", peer="B"))
    e.handle(AdvertIn(link="ab", full=False, entries=(("Q", "B", ("B",)),)))
    assert [(r["pattern"], r["origin"]) for r in e.interest()] == [("Q", "B")]
    frame = (("P", "B", ("B",)), ("P", "B", None), ("Q", "B", None))
    e.handle(AdvertIn(link="ab", full=False, entries=frame))
    assert e.interest() == []
    assert e.entry_count() == 0
    assert e.route("Q", (), None) == (frozenset(), [])
    assert e.route("P", (), None) == (frozenset(), [])


def test_a_path_with_a_node_twice_is_rejected() -> None:
    """No advertisement crosses a node twice (each refuses a path holding its ID): such a
    path is a peer's fabrication, rejected and counted like any bad path (an audit)."""
    e = RoutingEngine(ME)
    e.handle(LinkUp(link="ab", peer="B"))
    e.handle(AdvertIn(link="ab", full=False, entries=(("P", "O", ("O", "X", "O", "B")),)))
    e.handle(AdvertIn(link="ab", full=False, entries=(("Q", "B", ("B", "B")),)))
    assert e.interest() == [] and e.rejected == {"bad_path": 2}
    e.handle(AdvertIn(link="ab", full=False, entries=(("Q", "B", ("B",)),)))
    assert [(r["pattern"], r["path"]) for r in e.interest()] == [("Q", ["B"])]


def test_withdrawal_of_a_key_advertised_in_the_same_frame_over_another_link() -> None:
    e = RoutingEngine(ME)
    e.handle(LinkUp(link="ab", peer="B"))
    e.handle(LinkUp(link="ac", peer="C"))
    e.handle(AdvertIn(link="ac", full=False, entries=(("P", "O", ("O", "C")),)))
    frame = (("P", "O", ("O", "B")), ("P", "O", None))
    e.handle(AdvertIn(link="ab", full=False, entries=frame))
    assert [(r["pattern"], r["link"]) for r in e.interest()] == [("P", "ac")]
    e.handle(LinkDown(link="ac"))
    assert e.interest() == []
    assert e.route("P", (), None) == (frozenset(), [])


# -- the model ---------------------------------------------------------------------------------


@dataclass
class MLink:
    peer: str
    can_send: bool
    can_receive: bool
    options: LinkOptions
    adj_in: dict[Key, Path] = field(default_factory=dict)
    sticky: set[Key] = field(default_factory=set)
    held: set[Key] = field(default_factory=set)  # flagged held on a ghost further on
    up: bool = True


@dataclass
class Model:
    local: dict[str, bool] = field(default_factory=dict)  # pattern -> sticky
    links: dict[str, MLink] = field(default_factory=dict)

    def best(self) -> dict[Key, tuple[str | None, Path]]:
        out: dict[Key, tuple[str | None, Path]] = {(p, ME): (None, ()) for p in self.local}
        ranks: dict[Key, tuple[bool, int, str, str]] = {}
        for link_id, ln in self.links.items():
            for key, path in ln.adj_in.items():
                r = (not ln.up or key in ln.held, len(path), ln.peer, link_id)
                if key[1] != ME and (key not in ranks or r < ranks[key]):
                    ranks[key] = r
                    out[key] = (link_id, path)
        return out

    def sticky(self, key: Key, via: str | None) -> bool:
        if via is None:
            return self.local[key[0]]
        return key in self.links[via].sticky

    def held(self, key: Key, via: str | None) -> bool:
        """Advertised as held: sticky, and its best entry is on a ghost or flagged held."""
        if via is None or not self.sticky(key, via):
            return False
        return not self.links[via].up or key in self.links[via].held


PATTERNS = ["X", "X.Y", "X.*", "X.>", "*.Y", ">", "Z.Y"]
TOPICS = ["X", "X.Y", "X.Z", "Z.Y", "Q", "X.Y.Z"]
IDS = ["A", "B", "C", "D", "E"]
LINKS = ["l1", "l2", "l3"]

paths = st.lists(st.sampled_from(IDS), max_size=4).map(tuple)
entries = st.tuples(st.sampled_from(PATTERNS), st.sampled_from(IDS), st.one_of(st.none(), paths))
options = st.builds(
    LinkOptions,
    ttl=st.sampled_from([1, 2, 32]),
    conduit=st.booleans(),
    include=st.sampled_from([(), ("X.>",)]),
    exclude=st.sampled_from([(), ("X.Y",), ("Z.>",)]),
    static=st.sampled_from([(), ("Z.>",)]),
)


class EngineMachine(RuleBasedStateMachine):
    cache_size: int | None = None

    def __init__(self) -> None:
        super().__init__()
        self.engine = RoutingEngine(ME, cache_size=self.cache_size)
        # the same events, no caches anywhere: the reference router reads its table
        self.plain = RoutingEngine(ME, cache_size=0)
        self.model = Model()

    def feed(self, ev: LinkUp | LinkDown | AdvertIn | LocalSubscribe | LocalUnsubscribe) -> None:
        self.engine.handle(ev)
        self.plain.handle(ev)

    @rule(
        link=st.sampled_from(LINKS),
        peer=st.sampled_from(IDS[1:]),
        can_send=st.booleans(),
        can_receive=st.booleans(),
        opts=options,
    )
    def link_up(
        self, link: str, peer: str, can_send: bool, can_receive: bool, opts: LinkOptions
    ) -> None:
        self.feed(
            LinkUp(link=link, peer=peer, can_send=can_send, can_receive=can_receive, options=opts)
        )
        old = self.model.links.get(link)
        new = MLink(peer, can_send, can_receive, opts)
        if old is not None and not old.up:
            new.adj_in = dict(old.adj_in)
            new.sticky = set(old.adj_in)
        self.model.links[link] = new

    @rule(link=st.sampled_from(LINKS), keep=st.booleans())
    def link_down(self, link: str, keep: bool) -> None:
        self.feed(LinkDown(link=link, keep_sticky=keep))
        ln = self.model.links.get(link)
        if ln is None:
            return
        kept = {k: p for k, p in ln.adj_in.items() if k in ln.sticky}
        if keep and kept and ln.can_send:
            ln.up, ln.adj_in, ln.sticky, ln.held = False, kept, set(kept), set()
        else:
            del self.model.links[link]

    @rule(
        link=st.sampled_from(LINKS),
        full=st.booleans(),
        batch=st.lists(entries, max_size=8),
        sticky=st.lists(st.integers(0, 7), max_size=4),
        held=st.lists(st.integers(0, 7), max_size=3),
    )
    def advert(
        self,
        link: str,
        full: bool,
        batch: list[tuple[str, str, Path | None]],
        sticky: list[int],
        held: list[int],
    ) -> None:
        ln = self.model.links.get(link)
        # make most paths plausible (origin first, the link's peer last, no node twice),
        # keep some raw
        fixed: list[tuple[str, str, Path | None]] = []
        for i, (p, o, path) in enumerate(batch):
            if path is not None and ln is not None and i % 3:
                middle = tuple(dict.fromkeys(x for x in path if x not in (o, ln.peer)))
                path = (o,) if o == ln.peer else (o, *middle, ln.peer)
            fixed.append((p, o, path))
        keys = frozenset((fixed[i][0], fixed[i][1]) for i in sticky if i < len(fixed))
        held_keys = frozenset((fixed[i][0], fixed[i][1]) for i in held if i < len(fixed))
        self.feed(AdvertIn(link=link, full=full, entries=tuple(fixed), sticky=keys, held=held_keys))
        if ln is None or not ln.up:
            return
        if full:
            ln.adj_in.clear()
            ln.sticky.clear()
            ln.held.clear()
        for p, o, path in fixed:
            key = (p, o)
            ok = (
                path is not None
                and not path_holds(path, ME)
                and not ttl_spent(len(path), ln.options.ttl)
                and bool(path)
                and path[0] == o
                and path[-1] == ln.peer
                and len(set(path)) == len(path)
            )
            if ok:
                assert path is not None
                ln.adj_in[key] = path
                if key in keys:
                    ln.sticky.add(key)
                else:
                    ln.sticky.discard(key)
                if key in held_keys:
                    ln.held.add(key)
                else:
                    ln.held.discard(key)
            else:
                ln.adj_in.pop(key, None)
                ln.sticky.discard(key)
                ln.held.discard(key)

    @rule(pattern=st.sampled_from(PATTERNS), sticky=st.booleans())
    def subscribe(self, pattern: str, sticky: bool) -> None:
        self.feed(LocalSubscribe(pattern=pattern, sticky=sticky))
        self.model.local[pattern] = sticky

    @rule(
        link=st.sampled_from(LINKS),
        peer=st.sampled_from(IDS[1:]),
        can_send=st.booleans(),
        batch=st.lists(st.tuples(st.sampled_from(PATTERNS), st.sampled_from(IDS), paths)),
    )
    def restore_ghost(
        self, link: str, peer: str, can_send: bool, batch: list[tuple[str, str, Path]]
    ) -> None:
        """A restarted node restores the sticky entries it kept for a link not up yet."""
        self.engine.restore_ghost(link, peer, batch, can_send=can_send)
        self.plain.restore_ghost(link, peer, batch, can_send=can_send)
        if link in self.model.links or not batch:
            return
        ghost = MLink(peer, can_send, False, LinkOptions(), up=False)
        for p, o, path in batch:
            if o != ME and not path_holds(path, ME):
                ghost.adj_in[(p, o)] = path
                ghost.sticky.add((p, o))
        self.model.links[link] = ghost

    @rule(pattern=st.sampled_from(PATTERNS))
    def unsubscribe(self, pattern: str) -> None:
        self.feed(LocalUnsubscribe(pattern=pattern))
        self.model.local.pop(pattern, None)

    @rule(
        topic=st.sampled_from(TOPICS),
        path=st.sampled_from([(), ("B",), ("C", "D")]),
        to=st.sampled_from([None, ("B",), ("B", "C", "E")]),
    )
    def route(self, topic: str, path: Path, to: tuple[str, ...] | None) -> None:
        local, sends = self.engine.route(topic, path, to)
        ref = Router(self.plain._table, plan_limit=0)
        ref_local, ref_sends = ref._route(ref._plan(topic), topic, path, to)
        assert local == ref_local
        assert sorted(sends) == sorted(ref_sends)
        wanted = frozenset(p for p in self.model.local if topics.match(p, topic))
        assert local == wanted == self.engine.local_matches(topic)

    @rule()
    def flush(self) -> None:
        self.engine.flush()
        self.plain.flush()
        for link_id, ln in self.engine.links.items():
            assert ln.adj_out == self.expected_out(link_id), link_id

    def expected_out(self, link_id: str) -> dict[Key, tuple[Path, bool, None, bool]]:
        ln = self.model.links[link_id]
        if not ln.up or not ln.can_receive:
            return {}
        out = {}
        for key, (via, path) in self.model.best().items():
            new = (*path, ME)
            if (
                via != link_id
                and not path_holds(new, ln.peer)
                and not ttl_spent(len(new), ln.options.ttl)
                and self.engine.links[link_id].filter.allows_pattern(key[0])
            ):
                sticky, held = self.model.sticky(key, via), self.model.held(key, via)
                out[key] = (new, sticky, None, held)  # (no selectors here)
        return out

    @invariant()
    def table_is_what_the_events_imply(self) -> None:
        table = self.engine._table
        best = self.model.best()
        assert table.best == best
        assert table.local_patterns == set(self.model.local)
        assert table.local_sticky == {p for p, s in self.model.local.items() if s}
        assert sorted(table.remote.patterns()) == sorted((k[0], k) for k in best if k[1] != ME)
        assert sorted(table.local.patterns()) == sorted((p, p) for p in self.model.local)
        assert set(self.engine.links) == set(self.model.links)
        for link_id, ln in self.model.links.items():
            eln = self.engine.links[link_id]
            assert eln.adj_in == ln.adj_in
            assert eln.sticky & set(eln.adj_in) == ln.sticky
            assert eln.held & set(eln.adj_in) == ln.held
            assert eln.up == ln.up
        assert self.engine.entry_count() == sum(
            len(x.adj_in) for x in self.model.links.values()
        ) + len(self.model.local)


class TinyCacheEngineMachine(EngineMachine):
    cache_size = 2


_SETTINGS = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestEngineMachine = EngineMachine.TestCase
TestEngineMachine.settings = _SETTINGS
TestTinyCacheEngineMachine = TinyCacheEngineMachine.TestCase
TestTinyCacheEngineMachine.settings = _SETTINGS
