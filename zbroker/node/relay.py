"""The relay's hot loop: a MSGS frame's checked messages, taken run by run.

A link frame mostly holds runs: consecutive messages of one origin (and incarnation) on
one topic, by one path, for the same targets (a publisher's flood, cut into frames). What
a message needs from the node besides its own fields depends on that key only: the
forwarded path (or a loop), the route (local patterns and sends), the sends resolved to
links, the sinks that take it, the delivery buckets. So :func:`_plan` works them out once
per key and frame, and the per-message work left is the dedupe, one list per outgoing
copy and one envelope for the deliveries.

The dedupe keeps its per-origin semantics exactly (:meth:`DedupeWindow.state`): within a
run, the next seq above an origin's floor with nothing pending above is new and just moves
the floor, inline; any other seq (a gap, a repeat, a run's first message) goes through
:meth:`DedupeWindow.seen`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..routing.selection import Selective

if TYPE_CHECKING:
    from ..links.state import Link
    from .feature import Feature
    from .pipeline import Pipeline, Send

__all__ = ["Prepared", "PublishPlan", "picked", "publish_plan", "relay"]

#: entries in the cache of paths seen on links -> path forwarded (False: a loop)
FWD_CACHE_SIZE = 4096

#: per (topic, path, targets): (path forwarded or False for a loop, local patterns, sends
#: resolved to links, copies routed to links that are down, the sends if Selective, sinks)
Plan = tuple[
    "list[str] | bool",
    frozenset[str],
    "list[tuple[Link, list[str] | None, int]]",
    int,
    "Selective | None",
    "tuple[Feature, ...]",
]
#: a route's sends resolved for one frame: (the sends, resolved, copies lost)
Prepared = dict[int, "tuple[list[Send], list[tuple[Link, list[str] | None, int]], int]"]


def relay(pipe: Pipeline, batch: list[Any], out: dict[str, list[Any]]) -> int:
    """Dedupe, route, queue, sink and bucket checked link messages; returns the loops."""
    seen, state_of, drop, prefix, sink_out, dirty, select = _locals(pipe)
    plans: dict[tuple[Any, ...], Plan] = {}
    prepared: Prepared = {}  # (shared by the plans of one frame)
    loops = 0
    r_topic = r_path = r_targets = r_origin = r_inc = None  # the run's key (None: none yet)
    for m in batch:
        if m is None:
            continue
        topic, payload, fmt, headers, origin, inc, seq, ts, key_path, key_targets = m
        if (
            topic != r_topic
            or key_path != r_path
            or key_targets != r_targets
            or origin != r_origin
            or inc != r_inc
        ):  # a new run: its plan, and the dedupe state of its origin
            r_topic, r_path, r_targets, r_origin, r_inc = topic, key_path, key_targets, origin, inc
            plan = plans.get((topic, key_path, key_targets))
            if plan is None:
                plan = plans[topic, key_path, key_targets] = _plan(pipe, m, prepared)
            fwd, patterns, links, missing, selective, sinks = plan
            state = state_of(origin, inc) if fwd is not False else None
            dests: list[list[Any]] | None = None
        if fwd is False:
            loops += 1
            continue
        if state is not None and seq - 1 == state.floor and not state.above:
            state.floor = seq  # in order: what seen() would do, inline
        elif seen(origin, inc, seq):
            continue
        elif state is None:
            state = state_of(origin, inc)  # (the origin's first message registered it)
        if selective is not None:  # some targets stand behind selectors: per message
            links, missing = picked(pipe, selective.pick(headers), prepared)
        if missing:
            drop("link_down", missing)  # routed over a down link
        for out_link, out_targets, copies in links:
            fm = [topic, payload, fmt, headers, origin, inc, seq, ts, fwd, out_targets]
            box = out_link.outbox
            if not box:
                dirty.append(out_link)
            if copies == 1:
                box.append(fm)
            else:
                box.extend([fm] * copies)
        if not patterns:
            continue
        for f in sinks:
            sink_out.setdefault(f, []).append(m)
        if select is not None:  # subscriptions with a selector: buckets by headers
            dests = [out.setdefault(p, []) for p in select(patterns, headers) if p in prefix]
        elif dests is None:  # the run's buckets (created once a message reaches them)
            dests = [out.setdefault(p, []) for p in patterns if p in prefix]
        if dests:
            envelope = m[:8]  # [topic, payload, fmt, headers, origin, inc, seq, ts]
            for bucket in dests:
                bucket.append(envelope)
    return loops


def _locals(pipe: Pipeline) -> tuple[Any, ...]:
    """What :func:`relay` uses of the node, as locals: the dedupe's seen and state, the
    drop counter, delivery prefixes, the sinks' batch, the links' dirty list, and the
    selector matching (None while no subscription has a selector)."""
    dedupe, selected = pipe.dedupe, pipe._delivery.selected
    select = selected.names if selected.by_pattern else None
    sink_out, dirty = pipe._sink_out, pipe._links.dirty
    return (
        dedupe.seen,
        dedupe.state,
        pipe._counters.drop,
        pipe._delivery.prefix,
        sink_out,
        dirty,
        select,
    )


def _plan(pipe: Pipeline, m: list[Any], prepared: Prepared) -> Plan:
    """What the messages of ``m``'s key (topic, path, targets) get here."""
    topic, key_path, key_targets = m[0], m[8], m[9]
    fwd_paths = pipe._fwd_paths
    fwd = fwd_paths.get(key_path)
    if fwd is None:
        if len(fwd_paths) >= FWD_CACHE_SIZE:
            fwd_paths.clear()
        me = pipe._me
        fwd = fwd_paths[key_path] = False if me in key_path else [*key_path, me]
    if fwd is False:
        return False, frozenset(), [], 0, None, ()
    patterns, sends = pipe._engine.route(topic, key_path, key_targets)
    return (fwd, patterns, *_takers(pipe, patterns, sends, prepared))


def _takers(
    pipe: Pipeline, patterns: frozenset[str], sends: Any, prepared: Prepared
) -> tuple[list[tuple[Link, list[str] | None, int]], int, Selective | None, tuple[Feature, ...]]:
    """A route's takers besides local clients: its sends resolved to links (and the
    copies routed to links that are down), or the sends if Selective (resolved per
    message), and the feature sinks of its local patterns."""
    links: list[tuple[Link, list[str] | None, int]] = []
    missing, selective = 0, None
    if sends:
        if sends.__class__ is Selective:
            selective = sends
        else:
            links, missing = picked(pipe, sends, prepared)
    interest = pipe._interest
    sinks = interest.sinks_for(patterns) if patterns and interest.has_sinks else ()
    return links, missing, selective, sinks


def picked(
    pipe: Pipeline, sends: list[Send], prepared: Prepared
) -> tuple[list[tuple[Link, list[str] | None, int]], int]:
    """``sends`` resolved to links (once per frame: route() results are cached and
    shared, so their identity keys them)."""
    prep = prepared.get(id(sends))
    if prep is None or prep[0] is not sends:
        prep = prepared[id(sends)] = (sends, *pipe._links.resolve(sends))
    return prep[1], prep[2]


#: per topic of a client publish batch: (local patterns, sends resolved to links, copies
#: routed to links that are down, the sends if Selective, sinks, the delivery buckets in
#: this batch's ``out`` of the patterns clients hold)
PublishPlan = tuple[
    frozenset[str],
    "list[tuple[Link, list[str] | None, int]]",
    int,
    "Selective | None",
    "tuple[Feature, ...]",
    list[list[Any]],
]


def publish_plan(
    pipe: Pipeline, topic: str, prepared: Prepared, out: dict[str, Any]
) -> PublishPlan:
    """What the client publishes of ``topic`` in one batch get here (its buckets in
    ``out`` are made now: the batch's first message of the topic fills them)."""
    engine = pipe._engine
    if engine.links:
        patterns, sends = engine.route(topic, (), None)
    else:
        patterns, sends = engine.local_matches(topic), None
    links, missing, selective, sinks = _takers(pipe, patterns, sends, prepared)
    prefix = pipe._delivery.prefix
    dests = (
        []
        if pipe._delivery.selected.by_pattern
        else [out.setdefault(p, []) for p in patterns if p in prefix]
    )
    return patterns, links, missing, selective, sinks, dests
