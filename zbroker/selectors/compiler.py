"""Compiling a selector tree to one closure, and the evaluation rules it follows.

:func:`compile_selector` turns the tree of :mod:`.parser` into nested closures, once; a
message then costs one call of the outer closure (no tree walk, no lookups by node kind).

Values are ``None`` (NULL: a missing header, or one whose value is nil), numbers
(``int``/``float``; a ``bool`` is not a number), strings, booleans, or anything else a
header may hold (compared with nothing). The rules, as JMS states them:

* **three-valued logic**: a comparison, arithmetic, BETWEEN, IN or LIKE with a NULL operand
  is UNKNOWN (``None``); ``NOT`` UNKNOWN is UNKNOWN; ``AND`` is FALSE if either side is
  FALSE, else UNKNOWN if either is; ``OR`` is TRUE if either side is TRUE, else UNKNOWN if
  either is. A message is selected only when the selector is TRUE.
* comparing values of different types is FALSE; ``< > <= >=`` and BETWEEN compare numbers
  only (other types: FALSE); strings and booleans compare with ``=`` and ``<>``.
* arithmetic on a non-number or a division by zero is UNKNOWN; a header used as a
  condition is its value if it is a boolean, UNKNOWN if missing, FALSE otherwise.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from typing import Any

from .parser import Node

__all__ = ["Eval", "compile_selector", "like_regex"]

Headers = Mapping[str, Any]
Eval = Callable[[Headers], Any]

_ORDER = {"<": operator.lt, ">": operator.gt, "<=": operator.le, ">=": operator.ge}
_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv}


def _num(v: Any) -> bool:
    t = type(v)
    return t is int or t is float


def _kind(v: Any) -> str | None:
    """The comparison class of a value: numbers compare with numbers, and so on."""
    t = type(v)
    if t is int or t is float:
        return "n"
    if t is str:
        return "s"
    if t is bool:
        return "b"
    return None


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """LIKE ``pattern``: ``%`` any run of characters, ``_`` one character, ``escape``
    makes the next character literal."""
    out = []
    chars = iter(pattern)
    for c in chars:
        if escape is not None and c == escape:
            nxt = next(chars, None)
            out.append(re.escape(nxt if nxt is not None else c))
        elif c == "%":
            out.append(".*")
        elif c == "_":
            out.append(".")
        else:
            out.append(re.escape(c))
    return re.compile("".join(out), re.DOTALL)


def _value(node: Node) -> Eval:
    """A closure computing ``node``'s value (conditions give True/False/None)."""
    kind = node[0]
    if kind == "lit":
        v = node[1]
        return lambda h: v
    if kind == "id":
        get = operator.methodcaller("get", node[1])
        return get
    if kind == "neg":
        inner = _value(node[1])
        return lambda h: -x if _num(x := inner(h)) else None
    if kind == "arith":
        return _arith(node)
    return _condition(node)


def _arith(node: Node) -> Eval:
    fn, a, b = _ARITH[node[1]], _value(node[2]), _value(node[3])
    divide = node[1] == "/"

    def arith(h: Headers) -> Any:
        x, y = a(h), b(h)
        if not (_num(x) and _num(y)) or (divide and y == 0):
            return None
        try:
            return fn(x, y)
        except OverflowError:
            return None

    return arith


#: the types a literal of each comparison class equals (a bool is not a number)
_SAME = {"n": (int, float), "s": (str,), "b": (bool,)}


def _header_vs_literal(node: Node) -> Eval | None:
    """``header OP literal``, the common form, as one closure with no inner calls but the
    header lookup and the comparison (None when ``node`` has another form)."""
    op, left, right = node[1], node[2], node[3]
    if left[0] != "id" or right[0] != "lit":
        return None
    name, v = left[1], right[1]
    kind = _kind(v)
    if kind is None:
        return None
    types = _SAME[kind]
    if op in ("=", "<>"):
        want = op == "="

        def equal(h: Headers) -> bool | None:
            x = h.get(name)
            if x is None:
                return None
            return (type(x) in types and x == v) is want

        return equal
    if kind != "n":
        return lambda h: None if h.get(name) is None else False
    fn = _ORDER[op]

    def order(h: Headers) -> bool | None:
        x = h.get(name)
        if x is None:
            return None
        t = type(x)
        return (t is int or t is float) and fn(x, v)

    return order


def _compare(node: Node) -> Eval:
    fast = _header_vs_literal(node)
    if fast is not None:
        return fast
    op, a, b = node[1], _value(node[2]), _value(node[3])
    if op in ("=", "<>"):
        want = op == "="

        def equal(h: Headers) -> bool | None:
            x, y = a(h), b(h)
            if x is None or y is None:
                return None
            kx = _kind(x)
            return (kx is not None and kx == _kind(y) and x == y) is want

        return equal
    fn = _ORDER[op]

    def order(h: Headers) -> bool | None:
        x, y = a(h), b(h)
        if x is None or y is None:
            return None
        return bool(_num(x) and _num(y) and fn(x, y))

    return order


def _logic(node: Node) -> Eval:
    """AND/OR of two operands as one closure calling both; a longer chain (one flat node,
    :mod:`.parser`) as a loop over its operands, so its length costs no recursion."""
    if len(node) > 3:
        return _chain(node[0] == "and", tuple(_condition(n) for n in node[1:]))
    a, b = _condition(node[1]), _condition(node[2])
    if node[0] == "and":

        def both(h: Headers) -> bool | None:
            x = a(h)
            if x is False:
                return False
            y = b(h)
            if y is False:
                return False
            return None if x is None or y is None else True

        return both

    def either(h: Headers) -> bool | None:
        x = a(h)
        if x is True:
            return True
        y = b(h)
        if y is True:
            return True
        return None if x is None or y is None else False

    return either


def _chain(conjunction: bool, parts: tuple[Eval, ...]) -> Eval:
    """AND (``conjunction``) or OR of ``parts``, left to right: the first operand that
    decides (FALSE for AND, TRUE for OR) ends it; else UNKNOWN if any was, else the other."""

    def chain(h: Headers) -> bool | None:
        unknown = False
        for part in parts:
            x = part(h)
            if x is None:
                unknown = True
            elif x is not conjunction:
                return not conjunction
        return None if unknown else conjunction

    return chain


def _negated(fn: Eval, negated: bool) -> Eval:
    if not negated:
        return fn
    return lambda h: None if (x := fn(h)) is None else not x


def _condition(node: Node) -> Eval:
    """A closure giving True, False or None (UNKNOWN) for a condition node."""
    kind = node[0]
    if kind == "cmp":
        return _compare(node)
    if kind in ("and", "or"):
        return _logic(node)
    if kind == "not":
        return _negated(_condition(node[1]), True)
    if kind == "null":
        name, negated = node[2][1], node[1]
        return lambda h: (h.get(name) is None) is not negated
    if kind == "between":
        return _negated(_between(node), node[1])
    if kind == "in":
        return _negated(_in(node), node[1])
    if kind == "like":
        return _negated(_like(node), node[1])
    if kind == "id":
        name = node[1]
        return lambda h: x if type(x := h.get(name)) is bool or x is None else False
    if kind == "lit" and type(node[1]) is bool:
        v = node[1]
        return lambda h: v
    return _value(node)  # (the parser refuses non-conditions where one is needed)


def _between(node: Node) -> Eval:
    e, lo, hi = _value(node[2]), _value(node[3]), _value(node[4])

    def between(h: Headers) -> bool | None:
        x, low, high = e(h), lo(h), hi(h)
        if x is None or low is None or high is None:
            return None
        return bool(_num(x) and _num(low) and _num(high) and low <= x <= high)

    return between


def _in(node: Node) -> Eval:
    name = node[2][1]
    members = frozenset((_kind(v), v) for v in node[3])

    def among(h: Headers) -> bool | None:
        x = h.get(name)
        if x is None:
            return None
        kind = _kind(x)  # (None: a list or map, which no literal equals)
        return kind is not None and (kind, x) in members

    return among


def _like(node: Node) -> Eval:
    name = node[2][1]
    match = like_regex(node[3], node[4]).fullmatch

    def like(h: Headers) -> bool | None:
        x = h.get(name)
        if x is None:
            return None
        return type(x) is str and match(x) is not None

    return like


def compile_selector(tree: Node) -> Callable[[Headers], bool | None]:
    """The selector as one closure: True when the message's headers are selected, else
    False or None (UNKNOWN), both falsy: a caller tests its truth (no wrapper call)."""
    return _condition(tree)
