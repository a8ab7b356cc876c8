"""Local delivery filtered by selectors: which subscriptions with a selector take a
message, per message, and only while such subscriptions exist.

A subscription with a selector is a distinct XPUB key, ``pattern SEP selector NUL``
(:data:`~zbroker.wire.SELECTOR_SEP`; :mod:`zbroker.wire.frames`): libzmq counts its holders
like any key, reports the first and the last, and its delivery frames start with the key,
so two subscriptions of one pattern with different selectors get their own copies (and
clients holding the same key share frames, as for a plain pattern). The *name* of such a
subscription is the key as text (pattern, separator, selector as the client sent it).

The pipeline asks :meth:`Selected.names` for the names of the selected subscriptions
whose selectors accept a message, once per message and only while :attr:`Selected.by_pattern`
is not empty (a dict the pipeline tests for truth: nothing is called while no selector is
in use). Each selector is compiled once (:func:`zbroker.selectors.selector`); the
selectors that a set of local patterns reaches are resolved once per set, until a
selected subscription comes or goes.

Local interest of such a subscription is the source ``select:CANONICAL`` (the selector's
canonical text), counted per raw name, so that routing advertises the selectors behind the
pattern (:mod:`zbroker.routing.selection`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import SelectorError
from ..routing.selection import SELECT_SOURCE
from ..selectors import Selector, selector
from ..wire import SELECTOR_SEP
from .counters import Counters
from .interest import LocalInterest

__all__ = ["Selected", "split_name"]

_EMPTY: dict[str, Any] = {}


def split_name(name: str) -> tuple[str, str | None]:
    """A subscription name: (pattern, selector text or None)."""
    pattern, sep, text = name.partition(SELECTOR_SEP)
    return pattern, text if sep else None


class Selected:
    """The subscriptions with a selector that clients hold on this node."""

    def __init__(self, counters: Counters, interest: LocalInterest) -> None:
        self._counters = counters
        self._interest = interest
        #: pattern -> (name, compiled selector) of its selected subscriptions
        self.by_pattern: dict[str, tuple[tuple[str, Selector], ...]] = {}
        self._canon: dict[str, str] = {}  # name -> its selector's canonical text
        self._refs: dict[tuple[str, str], int] = {}  # (pattern, canonical) -> names
        self._resolved: dict[frozenset[str], tuple[tuple[str, Selector], ...]] = {}

    def valid(self, name: str) -> bool:
        """Is ``name``'s selector valid? (Counted and refused otherwise.)"""
        _, text = split_name(name)
        try:
            selector(text or "")
        except SelectorError as exc:
            self._counters.bad("subscriber", "bad_selector", str(exc).splitlines()[0])
            return False
        return True

    def first(self, name: str) -> None:
        """Clients hold the selected subscription ``name`` now (its selector is valid)."""
        pattern, text = split_name(name)
        sel = selector(text or "")
        self.by_pattern[pattern] = (*self.by_pattern.get(pattern, ()), (name, sel))
        self._canon[name] = sel.text
        key = (pattern, sel.text)
        n = self._refs.get(key, 0)
        self._refs[key] = n + 1
        if n == 0:
            self._interest.add(pattern, SELECT_SOURCE + sel.text)
        self._resolved.clear()

    def last(self, name: str) -> None:
        """No client holds ``name`` any more."""
        canon = self._canon.pop(name, None)
        if canon is None:
            return
        pattern, _ = split_name(name)
        left = tuple(e for e in self.by_pattern.get(pattern, ()) if e[0] != name)
        if left:
            self.by_pattern[pattern] = left
        else:
            self.by_pattern.pop(pattern, None)
        key = (pattern, canon)
        n = self._refs.pop(key, 1) - 1
        if n:
            self._refs[key] = n
        else:
            self._interest.drop(pattern, SELECT_SOURCE + canon)
        self._resolved.clear()

    def names(self, patterns: frozenset[str], headers: Mapping[str, Any] | None) -> Any:
        """``patterns`` plus the names of the selected subscriptions of those patterns
        whose selectors accept a message with ``headers`` (the pipeline delivers to
        every name it finds a prefix for)."""
        entries = self._resolved.get(patterns)
        if entries is None:
            by_pattern = self.by_pattern
            entries = tuple(e for p in patterns if p in by_pattern for e in by_pattern[p])
            if len(self._resolved) >= 4096:
                self._resolved.clear()
            self._resolved[patterns] = entries
        if not entries:
            return patterns
        h = headers if headers is not None else _EMPTY
        out = None
        for name, sel in entries:
            if sel.selects(h):  # (truthy exactly when selected)
                if out is None:
                    out = [*patterns, name]
                else:
                    out.append(name)
        return patterns if out is None else out
