"""Message selectors: the JMS SQL-92 subset over a message's headers.

``region = 'EU' AND qty > 100`` selects the messages whose ``region`` header is ``'EU'``
and whose ``qty`` header is a number above 100. :func:`selector` parses a text once and
compiles it to one closure (:mod:`.parser` has the grammar, :mod:`.compiler` the
evaluation rules, three-valued logic included); the result is cached by text, so a
selector that many subscriptions or advertisements name is compiled once per process.

A chain of ``AND`` or ``OR`` may be as long as :data:`MAX_SELECTOR` allows; nesting
(parentheses, ``NOT``, signs, arithmetic operators) stops at :data:`MAX_DEPTH` levels, a
:class:`SelectorError` like any other invalid selector.

A selector's *canonical* text (:attr:`Selector.text`) is what travels in advertisements
and names local interest: selectors that differ only in layout or keyword case share it.
Pure Python, no I/O: the routing engine (sans-IO) uses it too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import SelectorError
from .compiler import compile_selector
from .parser import MAX_DEPTH, MAX_SELECTOR, parse, unparse

__all__ = ["MAX_DEPTH", "MAX_SELECTOR", "Selector", "SelectorError", "canonical", "selector"]

#: compiled selectors kept by text (raw and canonical) before the cache starts over
_CACHE_SIZE = 4096
_cache: dict[str, Selector] = {}


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled selector: ``text`` its canonical text, ``selects(headers)`` the test
    (truthy exactly when selected: True; False and None, UNKNOWN, are both a no)."""

    text: str
    selects: Callable[[Mapping[str, Any]], bool | None]

    def __call__(self, headers: Mapping[str, Any] | None) -> bool:
        return self.selects(headers if headers is not None else _EMPTY) is True


_EMPTY: Mapping[str, Any] = {}


def selector(text: str) -> Selector:
    """Parse and compile ``text`` (cached); raises :class:`SelectorError` naming the
    position and what was expected there."""
    hit = _cache.get(text)
    if hit is not None:
        return hit
    try:
        tree = parse(text)
        canon = unparse(tree)
        sel = _cache.get(canon)
        if sel is None:
            sel = Selector(canon, compile_selector(tree))
    except RecursionError:  # (the parser's MAX_DEPTH should make this unreachable)
        raise SelectorError(text, 0, f"at most {MAX_DEPTH} levels of nesting") from None
    if len(_cache) >= _CACHE_SIZE:
        _cache.clear()
    _cache[text] = _cache[canon] = sel
    return sel


def canonical(text: str) -> str:
    """The canonical text of a selector (raises :class:`SelectorError` if invalid)."""
    return selector(text).text
