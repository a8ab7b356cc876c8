"""The relay's hot loop: a link frame's checked runs, each taken whole.

A link frame holds runs (MSGR, :mod:`zbroker.wire.runs`): consecutive messages of one
origin (and incarnation) on one topic, by one path, for the same targets. What a message
needs from the node besides its own fields depends on that key only: the forwarded path
(or a loop), the route (local patterns and sends), the sends resolved to links, the sinks
that take it, the delivery buckets. So :func:`_plan` works them out once per key and
frame, and the per-message work left is the dedupe. The messages a run forwards leave as
one run per outgoing link whose entries are the list that came in (cut-through: nothing
is decoded again or copied per message), and the same list goes to the subscribers as a
delivery run, unless selectors decide per message. A run taken whole, whose entries'
bytes the frame's decode kept (:mod:`zbroker.wire.splice`), takes those bytes along:
nothing is packed again either.

The dedupe keeps its per-origin semantics exactly (:meth:`DedupeWindow.state`): within a
run, the next seq above an origin's floor with nothing pending above is new and just moves
the floor, inline; any other seq goes through :meth:`DedupeWindow.seen`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..routing.selection import Selective

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..links.state import Link
    from .feature import Feature
    from .pipeline import Pipeline, Send

__all__ = [
    "Prepared",
    "check_senders",
    "picked",
    "queue_selected",
    "relay",
    "selected_runs",
    "takers",
]

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


def check_senders(runs: list[Any], peer: str, errors: list[tuple[str, str]]) -> None:
    """A checked run whose path does not end with the link's peer becomes None, each of
    its messages bad input (told in ``errors``): every node adds itself to a path before it
    sends, so such a path is a peer speaking for others, whose seqs would move their
    origins' dedupe floors."""
    for i, run in enumerate(runs):
        if run is not None and (not run[3] or run[3][-1] != peer):
            runs[i] = None
            entries = run[5]
            error = ("path_not_from_peer", f"path {list(run[3])} of {run[0]!r}")
            errors.extend([error] * (len(entries) - entries.count(None)))


def relay(pipe: Pipeline, runs: list[Any], out: dict[str, list[Any]]) -> int:
    """Dedupe, route, queue, sink and bucket the checked runs of a link frame (MSGR, or
    MSGS taken as runs); returns the loops."""
    seen, state_of, drop, prefix, sink_out, dirty, select = _locals(pipe)
    plans: dict[tuple[Any, ...], Plan] = {}
    prepared: Prepared = {}  # (shared by the plans of one frame)
    loops = 0
    for run in runs:
        if run is None:
            continue
        topic, origin, inc, key_path, key_targets, entries = run[:6]
        plan = plans.get((topic, key_path, key_targets))
        if plan is None:
            plan = plans[topic, key_path, key_targets] = _plan(
                pipe, topic, key_path, key_targets, prepared
            )
        fwd, patterns, links, missing, selective, sinks = plan
        if fwd is False:
            loops += len(entries) - entries.count(None)
            continue
        kept = _fresh(seen, state_of, origin, inc, entries)
        if not kept:
            continue
        # all of them, as they came: their bytes (if kept: .splice) go on with them
        body = [kept, run[6]] if kept is entries and len(run) == 7 else [kept]
        head = [topic, origin, inc, fwd]
        if selective is not None:  # some targets stand behind selectors: per message
            tails: dict[tuple[int, int], list[Any]] = {}
            for e in kept:
                missing = queue_selected(pipe, selective, prepared, tails, head, e)[1]
                if missing:
                    drop("link_down", missing)
        else:
            if missing:
                drop("link_down", missing * len(kept))  # routed over a down link
            for out_link, out_targets, copies in links:
                # cut-through: the run's entries go on as they came
                box = out_link.outbox
                if not box:
                    dirty.append(out_link)
                if copies == 1:
                    box.append([*head, out_targets, *body])
                else:
                    box.append([*head, out_targets, _copies(kept, copies)])
        if not patterns:
            continue
        if sinks:
            ms = [[topic, e[0], e[1], e[2], origin, inc, e[3], e[4], *run[3:5]] for e in kept]
            for f in sinks:
                sink_out.setdefault(f, []).extend(ms)
        if select is not None:  # subscriptions with a selector: buckets by headers
            selected_runs(out, prefix, select, patterns, [topic, origin, inc], kept)
            continue
        # delivery runs: the entries go on as they came (the subscriber reads runs)
        delivered = [topic, origin, inc, *body]
        for p in patterns:
            if p in prefix:
                out.setdefault(p, []).append(delivered)
    return loops


def selected_runs(
    out: dict[str, list[Any]],
    prefix: dict[str, bytes],
    select: Callable[[frozenset[str], Any], Any],
    patterns: frozenset[str],
    head: list[Any],
    kept: list[Any],
) -> None:
    """Bucket a run's entries by the subscriptions whose selectors their headers pass:
    per pattern, one delivery run of the entries it takes."""
    runs: dict[str, list[Any]] = {}
    for e in kept:
        for p in select(patterns, e[2]):
            if p in prefix:
                run = runs.get(p)
                if run is None:
                    run = runs[p] = [*head, []]
                    out.setdefault(p, []).append(run)
                run[3].append(e)


def _fresh(seen: Any, state_of: Any, origin: str, inc: int, entries: list[Any]) -> list[Any]:
    """The entries of a run not seen before (``entries`` itself when all are new, the
    common case). The dedupe keeps its per-origin semantics exactly: the next seq above
    the origin's floor with nothing pending above is new and just moves the floor,
    inline; any other seq goes through :meth:`DedupeWindow.seen`."""
    state = state_of(origin, inc)
    kept = None
    for i in range(len(entries)):
        e = entries[i]
        if e is None:
            new = False
        else:
            seq = e[3]
            if state is not None and seq - 1 == state.floor and not state.above:
                state.floor = seq  # in order: what seen() would do, inline
                new = True
            elif seen(origin, inc, seq):
                new = False
            else:
                new = True
                if state is None:
                    state = state_of(origin, inc)  # (its first message registered it)
        if new:
            if kept is not None:
                kept.append(e)
        elif kept is None:
            kept = entries[:i]
    return entries if kept is None else kept


def _copies(entries: list[Any], copies: int) -> list[Any]:
    """Each entry ``copies`` times in a row (a link that is no conduit)."""
    return [e for e in entries for _ in range(copies)]


def queue_selected(
    pipe: Pipeline,
    selective: Selective,
    prepared: Prepared,
    tails: dict[tuple[int, int], list[Any]],
    head: list[Any],
    e: list[Any],
) -> tuple[list[tuple[Link, list[str] | None, int]], int]:
    """Queue entry ``e`` (``head``: its run's topic, origin, incarnation and path) whose
    sends depend on its headers: onto the run each link's outbox ends with for its
    targets, if ``tails`` made it, else a new one. Returns the sends resolved to links,
    and the copies routed to links that are down (the caller counts them)."""
    links, missing = picked(pipe, selective.pick(e[2]), prepared)
    dirty = pipe._links.dirty
    for link, targets, copies in links:
        box = link.outbox
        key = (id(link), id(targets))
        run = tails.get(key)
        if run is None or not box or box[-1] is not run:
            if not box:
                dirty.append(link)
            run = tails[key] = [*head, targets, []]
            box.append(run)
        run[5].extend([e] * copies)
    return links, missing


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


def _plan(
    pipe: Pipeline,
    topic: str,
    key_path: tuple[str, ...],
    key_targets: tuple[str, ...] | None,
    prepared: Prepared,
) -> Plan:
    """What the messages of a run's key (topic, path, targets) get here."""
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
    return (fwd, patterns, *takers(pipe, patterns, sends, prepared))


def takers(
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
