"""Client publishes, taken as runs: the publish ingress's hot loop.

Every publish form reaches here as runs (:mod:`zbroker.wire.publish`: a client of protocol
3 sends batches of runs; publish frames are grouped into runs as they are checked):
consecutive messages on one topic. What a publish needs from the node besides its own
fields depends on its topic only: the route, the sends resolved to links, the sinks, the
delivery buckets. So :func:`publish_plan` works them out once per topic and drain, and
the per-message work left is numbering: each entry ``[payload, fmt, headers]`` gets its
sequence and receive time appended in place, becoming the ``[payload, fmt, headers, seq,
ts]`` that link runs and delivery runs carry, and the same entry lists go to the links
(onto the run each outbox ends with) and to the subscribers (as one delivery run), unless
selectors decide per message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..const import LINK_BATCH
from .relay import Prepared, queue_selected, selected_runs, takers

if TYPE_CHECKING:
    from ..links.state import Link
    from ..routing.selection import Selective
    from .feature import Feature
    from .pipeline import Pipeline

__all__ = ["PublishPlan", "publish_plan", "take_runs"]

#: per topic of a drain of client publishes: (local patterns, sends resolved to links,
#: copies routed to links that are down, the sends if Selective, sinks, the delivery
#: buckets in this drain's ``out`` of the patterns clients hold, per resolved send the run
#: its link's outbox took this topic's messages into last and their payload bytes (if
#: Selective: the runs by link and targets, see :func:`queue_selected`)
PublishPlan = tuple[
    frozenset[str],
    "list[tuple[Link, list[str] | None, int]]",
    int,
    "Selective | None",
    "tuple[Feature, ...]",
    list[list[Any]],
    Any,
]


def take_runs(
    pipe: Pipeline,
    runs: list[Any],
    out: dict[str, list[Any]],
    plans: dict[str, PublishPlan],
    prepared: Prepared,
) -> tuple[int, int, str]:
    """Number, route, queue, sink and bucket checked publish runs (a bad run is None);
    returns (messages taken, how many of them no subscriber anywhere wanted, the topic
    of the last of those)."""
    origin, inc, path = pipe._me, pipe._inc, [pipe._me]  # (path: shared)
    seq = first = pipe._counters.seq
    unrouted, unrouted_topic = 0, ""
    groups = pipe.group_hook if pipe._engine.groups.active else None
    ts = time.time()  # the node's receive time: one recv brought the frame's messages
    for run in runs:
        if run is None or not run[1]:
            continue
        topic, entries = run
        size = 0  # (its payload bytes: where link frames end, see _queue)
        for e in entries:
            seq += 1
            e.append(seq)
            e.append(ts)
            size += len(e[0])
        plan = plans.get(topic) or publish_plan(pipe, topic, prepared, out, plans)
        patterns, links, missing, selective, sinks, dests, tails = plan
        ms = (
            [[topic, e[0], e[1], e[2], origin, inc, e[3], e[4]] for e in entries]
            if groups is not None or sinks
            else None
        )
        hooked = None if groups is None else [groups(m) for m in ms]  # type: ignore[union-attr]
        if selective is not None:  # some targets stand behind selectors: per message
            nowhere = _queue_selected(
                pipe, selective, prepared, tails, [topic, origin, inc, path], entries
            )
        else:
            nowhere = [] if links or missing else [True] * len(entries)
            if missing:
                pipe._counters.drop("link_down", missing * len(entries))
            _queue(pipe, links, tails, [topic, origin, inc, path], entries, size)
        if not patterns:
            lost = _unrouted(nowhere, hooked)
            if lost:  # no subscriber anywhere (counted, topic kept)
                unrouted, unrouted_topic = unrouted + lost, topic
            continue
        for f in sinks:
            pipe._sink_out.setdefault(f, []).extend(ms)  # type: ignore[arg-type]
        _bucket(pipe, [topic, origin, inc], patterns, dests, out, entries)
    return seq - first, unrouted, unrouted_topic


def _queue(
    pipe: Pipeline,
    links: list[tuple[Link, Any, int]],
    tails: Any,
    head: list[Any],
    entries: list[Any],
    size: int,
) -> None:
    """Put a run's entries (``size`` payload bytes) on each link: onto the run this
    topic's messages took on the link if its outbox still ends with it (order is kept
    across topics) and it has room, else a new one (never the entries list itself: a
    later run may extend it). Room: a run ends where a link frame would (LINK_BATCH
    messages, the link's batch bytes), so the flush takes runs whole, rather than
    cutting a pass's one long run by looking at every entry and slicing it."""
    dirty = pipe._links.dirty
    for j in range(len(links)):
        out_link, out_targets, copies = links[j]
        box, tail = out_link.outbox, tails[j]
        n, b = len(entries) * copies, size * copies
        if (
            tail is None
            or not box
            or box[-1] is not tail[0]
            or len(tail[0][5]) + n > LINK_BATCH
            or tail[1] + b > out_link.batch_bytes  # (full: the next frame's run starts here)
        ):
            if not box:
                dirty.append(out_link)
            run: list[Any] = [*head, out_targets, []]
            tail = tails[j] = [run, 0]
            box.append(run)
        tail[0][5].extend(entries if copies == 1 else [e for e in entries for _ in range(copies)])
        tail[1] += b


def _queue_selected(
    pipe: Pipeline,
    selective: Selective,
    prepared: Prepared,
    tails: Any,
    head: list[Any],
    entries: list[Any],
) -> list[bool]:
    """Queue a run's entries whose sends depend on their headers, one by one; returns
    per entry whether it went to no link (nor a down one)."""
    drop, nowhere = pipe._counters.drop, []
    for e in entries:
        links, missing = queue_selected(pipe, selective, prepared, tails, head, e)
        if missing:
            drop("link_down", missing)  # routed over a down link: nowhere to wait
        nowhere.append(not links and not missing)
    return nowhere


def _bucket(
    pipe: Pipeline,
    head: list[Any],
    patterns: frozenset[str],
    dests: list[list[Any]],
    out: dict[str, list[Any]],
    entries: list[Any],
) -> None:
    """A run's messages, as one delivery run (``head``: topic, origin, incarnation), to
    the buckets of the patterns clients hold (per pattern by headers while some
    subscription has a selector)."""
    selected = pipe._delivery.selected
    if selected.by_pattern:  # subscriptions with a selector: buckets by headers
        selected_runs(out, pipe._delivery.prefix, selected.names, patterns, head, entries)
        return
    if dests:
        delivered = [*head, entries]
        for bucket in dests:
            bucket.append(delivered)


def _unrouted(nowhere: list[bool], hooked: list[bool] | None) -> int:
    """How many of a run's messages no subscriber anywhere wanted: they went to no link
    (``nowhere``, per message; empty: all went somewhere) and no queue group took them
    (``hooked``, per message, None while no group is active)."""
    if hooked is None:
        return sum(nowhere)
    return sum(1 for n, h in zip(nowhere, hooked, strict=False) if n and not h)


def publish_plan(
    pipe: Pipeline,
    topic: str,
    prepared: Prepared,
    out: dict[str, Any],
    plans: dict[str, PublishPlan],
) -> PublishPlan:
    """What the client publishes of ``topic`` in one drain get here (its buckets in
    ``out`` are made now: the drain's first run of the topic fills them), kept in
    ``plans``."""
    engine = pipe._engine
    if engine.links:
        patterns, sends = engine.route(topic, (), None)
    else:
        patterns, sends = engine.local_matches(topic), None
    links, missing, selective, sinks = takers(pipe, patterns, sends, prepared)
    prefix = pipe._delivery.prefix
    dests = (
        []
        if pipe._delivery.selected.by_pattern
        else [out.setdefault(p, []) for p in patterns if p in prefix]
    )
    # per link: [the run its outbox took this topic's messages into last, their payload
    # bytes] (_queue), or queue_selected's dict
    tails: Any = {} if selective is not None else [None] * len(links)
    plan = plans[topic] = (patterns, links, missing, selective, sinks, dests, tails)
    return plan
