"""Selectors in routing: which selectors stand behind local interest.

Local interest in a pattern is *selected* when every source of it is a subscription with
a selector (source ``select:CANONICAL``): the node then wants only the messages one of
those selectors accepts. Any other source (a plain subscriber, a retention rule, a
durable subscription, a feature) wants every message of the pattern, and so does the
pattern as a whole. :func:`local_selectors` says which: ``None`` for all, else the set
of canonical selector texts.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SELECT_SOURCE", "local_selectors"]

#: the interest source of a subscription with a selector: ``select:`` + canonical text
SELECT_SOURCE = "select:"


def local_selectors(sources: Iterable[str]) -> frozenset[str] | None:
    """The selectors behind local interest with these sources (None: every message)."""
    texts = []
    for s in sources:
        if not s.startswith(SELECT_SOURCE):
            return None
        texts.append(s[len(SELECT_SOURCE) :])
    return frozenset(texts) if texts else None
