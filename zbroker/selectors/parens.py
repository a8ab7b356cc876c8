"""Parentheses that only group an AND/OR chain inside a chain, dropped before parsing.

The parser splices a parenthesized chain of the same kind into its chain (AND and OR are
associative in three-valued logic), so ``(a OR b) OR c`` and ``a OR b OR c`` are one
tree; and ``(a AND b) OR c`` is ``a AND b OR c``, AND binding tighter. But the parser
recurses into every parenthesis, and nesting is bounded (:data:`.parser.MAX_DEPTH`): the
canonical text of earlier releases parenthesized every operation, so a chain of 65
terms, ``((((a = 0) OR (a = 1)) OR (a = 2)) ...)``, as durables stored it, would be
refused on reading. :func:`drop_redundant` removes, from the tokens, every pair of
parentheses whose content is a chain that its place would give the same tree without
them, in one pass with a stack: the content's lowest operator is OR and the operators
beside the pair are OR (or the pair's group ends there), or its lowest operator is AND
and the operators beside it are AND or OR. Whatever it keeps, and every token's
position (for errors), is the parser's as before.
"""

from __future__ import annotations

from typing import Any

__all__ = ["drop_redundant"]

Token = tuple[str, Any, int]

_OPEN = ("op", "(")
_CLOSE = ("op", ")")
_BOUNDARY = {("kw", "AND"), ("kw", "OR"), _OPEN, _CLOSE, ("end", None)}


def drop_redundant(toks: list[Token]) -> list[Token]:
    """``toks`` (ending with the ``end`` token) without the redundant pairs; unchanged if
    the parentheses do not balance (the parser says where)."""
    pairs = _chain_pairs(toks)
    if not pairs:
        return toks
    drop: set[int] = set()
    for i, (j, kind) in pairs.items():
        before = toks[i - 1][:2] if i else ("end", None)
        after = toks[j + 1][:2]
        if before not in _BOUNDARY or after not in _BOUNDARY:
            continue  # an operand of NOT, a comparison, IN, arithmetic...
        if before == _CLOSE or after == _OPEN:
            continue  # (not a place an operand can be)
        if kind == "OR" and ("kw", "AND") in (before, after):
            continue  # an OR chain inside AND keeps its parentheses
        drop.update((i, j))
    return [t for n, t in enumerate(toks) if n not in drop]


def _chain_pairs(toks: list[Token]) -> dict[int, tuple[int, str]]:
    """Every pair of parentheses whose content's lowest operator at its own level is AND
    or OR: opening index -> (closing index, that operator); empty if unbalanced."""
    # per open group: (its opening index, operators seen at its level, BETWEEN pending)
    stack: list[tuple[int, set[str], list[bool]]] = [(-1, set(), [False])]
    pairs: dict[int, tuple[int, str]] = {}
    for n, (kind, value, _) in enumerate(toks):
        if (kind, value) == _OPEN:
            stack.append((n, set(), [False]))
        elif (kind, value) == _CLOSE:
            if len(stack) == 1:
                return {}
            i, ops, _ = stack.pop()
            if "OR" in ops or "AND" in ops:
                pairs[i] = (n, "OR" if "OR" in ops else "AND")
        elif kind == "kw":
            ops, between = stack[-1][1], stack[-1][2]
            if value == "BETWEEN":
                between[0] = True
            elif value == "AND" and between[0]:
                between[0] = False  # (BETWEEN's own AND)
            elif value in ("AND", "OR"):
                ops.add(value)
    return pairs if len(stack) == 1 else {}
