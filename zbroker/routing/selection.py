"""Rule 7 of :mod:`zbroker.routing.engine`: selectors travel with interest.

Local interest in a pattern is *selected* when every source of it is a subscription with
a selector (source ``select:CANONICAL``) or another source that names its selector
(``KIND:NAME select:CANONICAL``, :func:`selected_source`: a durable subscription with a
selector): the node then wants only the messages one of those selectors accepts. Any
other source (a plain subscriber, a retention rule, a durable subscription without a
selector, a feature) wants every message of the pattern, and so does the pattern as a
whole. :func:`local_selectors` says which: ``None`` for all, else the set of canonical
selector texts.

An interest entry ``(pattern, origin)`` carries the selectors of its origin's local
interest, unchanged along its path (an advertisement never merges origins, so there is
nothing to widen on the way: a relay ORs the selectors of every origin behind a link when
it routes, which is where ActiveMQ's conduit subscription lost them). The router builds,
per literal topic, the selectors each origin stands behind (all of the origin's matching
entries must be selected, else the origin wants everything) and hands the pipeline a
:class:`Selective` list of sends when some target of a route is selected: its
:meth:`Selective.pick` drops, per message, the targets no selector accepts, and the sends
left without targets. A topic with no selected origin gets a plain list: no per-message
work when no selector is in use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import SelectorError
from ..selectors import Selector, selector

__all__ = [
    "SELECT_SOURCE",
    "Conditions",
    "Selective",
    "conditions",
    "local_selectors",
    "selected_source",
    "set_local",
]

#: the interest source of a subscription with a selector: ``select:`` + canonical text
SELECT_SOURCE = "select:"

_EMPTY: dict[str, Any] = {}
Send = tuple[str, tuple[str, ...] | None, int]  # (link id, targets or None, copies)
#: per selected origin, the selectors any of which must accept a message for it
Conditions = dict[str, tuple[Selector, ...]]


#: what separates a source's own name from the selector it names (no name holds a space)
_NAMED_SELECTOR = " " + SELECT_SOURCE


def selected_source(source: str, text: str | None) -> str:
    """The interest source ``source`` (``KIND:NAME``, no space in it) standing for only
    what the selector of canonical ``text`` accepts (None: every message)."""
    return source if text is None else source + _NAMED_SELECTOR + text


def local_selectors(sources: Iterable[str]) -> frozenset[str] | None:
    """The selectors behind local interest with these sources (None: every message)."""
    texts = []
    for s in sources:
        if s.startswith(SELECT_SOURCE):
            texts.append(s[len(SELECT_SOURCE) :])
            continue
        _, sep, text = s.partition(_NAMED_SELECTOR)
        if not sep:
            return None
        texts.append(text)
    return frozenset(texts) if texts else None


def set_local(
    table: dict[str, frozenset[str]], pattern: str, selectors: frozenset[str] | None
) -> bool:
    """Record the selectors of local interest in ``pattern``; did they change?"""
    old = table.get(pattern)
    if selectors is None:
        table.pop(pattern, None)
    else:
        table[pattern] = selectors
    return old != selectors


def conditions(selected: Mapping[str, set[str]], unconditional: set[str]) -> Conditions:
    """Compile the selectors of each origin that wants only selected messages. A text
    that does not compile (a peer's bug) makes its origin want everything: more traffic,
    never a loss."""
    out: Conditions = {}
    for origin, texts in selected.items():
        if origin in unconditional:
            continue
        try:
            out[origin] = tuple(selector(t) for t in sorted(texts))
        except SelectorError:
            continue
    return out


class Selective(list[Send]):
    """The sends of a route whose targets include selected origins (``cond``): call
    :meth:`pick` with a message's headers for the sends that message takes."""

    __slots__ = ("_cond", "_picks")

    def __init__(self, sends: list[Send], cond: Conditions) -> None:
        super().__init__(sends)
        self._cond = tuple(cond.items())
        self._picks: dict[tuple[str, ...], list[Send]] = {}

    def pick(self, headers: Mapping[str, Any] | None) -> list[Send]:
        """The sends of a message with ``headers``: targets no selector of theirs accepts
        are dropped, and sends left with none (a static push, targets None, stays)."""
        h = headers if headers is not None else _EMPTY
        rejected = None
        for origin, sels in self._cond:
            for sel in sels:
                if sel.selects(h):  # (truthy exactly when selected)
                    break
            else:
                if rejected is None:
                    rejected = [origin]
                else:
                    rejected.append(origin)
        if not rejected:
            return self
        key = tuple(rejected)
        hit = self._picks.get(key)
        if hit is None:
            hit = []
            for link_id, targets, copies in self:
                if targets is None:
                    hit.append((link_id, None, copies))
                    continue
                kept = tuple(t for t in targets if t not in key)
                if kept:
                    hit.append((link_id, kept, copies))
            if len(self._picks) >= 256:
                self._picks.clear()
            self._picks[key] = hit
        return hit
