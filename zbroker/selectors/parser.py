"""The selector language: tokens, the parser, and the tree it builds.

A selector is the SQL-92 subset JMS message selectors use, over a message's headers::

    region = 'EU' AND qty > 100
    NOT (kind IN ('a', 'b')) OR name LIKE 'ab\\_%' ESCAPE '\\'
    price * 1.2 BETWEEN 10 AND 20 AND note IS NOT NULL

Precedence, loosest first: ``OR``, ``AND``, ``NOT``, the predicates (comparisons
``= <> < > <= >=``, ``[NOT] BETWEEN``, ``[NOT] IN``, ``[NOT] LIKE ... [ESCAPE]``,
``IS [NOT] NULL``), ``+ -``, ``* /``, unary ``+ -``. Keywords are case-insensitive;
identifiers (header names) are Java identifiers, case-sensitive; strings are quoted with
``'`` (``''`` inside one is a quote); numbers are integers or decimals with an optional
exponent; ``TRUE`` and ``FALSE`` are the boolean literals.

The tree is nested tuples (hashable, comparable: the tests check that printing a tree and
parsing the text gives the same tree back):

==========================================  =========================================
node                                        meaning
==========================================  =========================================
``("lit", value)``                          a literal: str, int, float or bool
``("id", name)``                            the header ``name`` (missing: NULL)
``("neg", e)``                              unary minus
``("arith", op, a, b)``                     ``+ - * /``
``("cmp", op, a, b)``                       ``= <> < > <= >=``
``("between", negated, e, low, high)``
``("in", negated, ("id", name), values)``   values: a tuple of literal values
``("like", negated, ("id", name), pattern, escape)``   escape: a 1-char str or None
``("null", negated, ("id", name))``         ``IS [NOT] NULL``
``("not", e)``, ``("and", a, b, ...)``,     a chain of two or more operands, flat:
``("or", a, b, ...)``                       no operand is a chain of the same kind
==========================================  =========================================

A chain of ``AND`` (or of ``OR``) is one node however long, built in a loop: such a
selector is as long as :data:`MAX_SELECTOR` allows. A parenthesized chain of the same
kind is spliced into it (both are associative in three-valued logic, and the operands
keep their order), so ``(a AND b) AND c`` shares its canonical text with ``a AND b AND c``.
What nests is bounded by :data:`MAX_DEPTH`: parentheses (but not those that only group a
chain inside a chain, which :mod:`.parens` drops first: the older canonical text nested
one per operator), ``NOT`` and signs the parser recurses into, and the operations of the
tree (an arithmetic chain nests one level per operator), which the compiler, the
evaluation and :func:`unparse` recurse into. Deeper is a
:class:`~zbroker.errors.SelectorError`, well before Python's recursion limit.

Every error names the position (0-based character offset) and what was expected there.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..errors import SelectorError
from .parens import drop_redundant

__all__ = ["MAX_DEPTH", "MAX_SELECTOR", "Node", "parse", "unparse"]

Node = tuple[Any, ...]

#: longest selector accepted (characters): a selector travels in every advertisement
MAX_SELECTOR = 4096
#: deepest nesting accepted: parentheses, NOT and signs inside one another, and operations
#: of the tree inside one another (each recursion costs Python frames, the parser's about
#: eight per parenthesis: 64 keeps the whole well under the default limit of 1000)
MAX_DEPTH = 64
_TOO_DEEP = f"at most {MAX_DEPTH} levels of nesting (parentheses, NOT, signs, operators)"

KEYWORDS = frozenset(
    {"AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"}
)
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
      | (?P<num>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
      | (?P<str>'(?:[^']|'')*')
      | (?P<word>[A-Za-z_$][A-Za-z0-9_$]*)
      | (?P<op><>|<=|>=|[=<>+\-*/(),])
    """,
    re.VERBOSE,
)
_COMPARE = ("=", "<>", "<", ">", "<=", ">=")

Token = tuple[str, Any, int]  # (kind, value, position); kinds: num str word kw op end


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] == "'":
                raise SelectorError(text, pos, "a closing quote for this string")
            raise SelectorError(text, pos, "an identifier, literal or operator", repr(text[pos]))
        kind = m.lastgroup
        value: Any = m.group()
        if kind == "num":
            value = float(value) if any(c in value for c in ".eE") else int(value)
            if value in (float("inf"), float("-inf")):
                raise SelectorError(text, pos, "a finite number", m.group())
        elif kind == "str":
            value = value[1:-1].replace("''", "'")
        elif kind == "word" and value.upper() in KEYWORDS:
            kind, value = "kw", value.upper()
        if kind != "ws":
            out.append((str(kind), value, pos))
        pos = m.end()
    out.append(("end", None, len(text)))
    return out


def _describe(tok: Token) -> str:
    kind, value, _ = tok
    if kind == "end":
        return "the end"
    if kind == "str":
        return f"string '{value}'"
    return repr(str(value)) if kind != "num" else f"number {value}"


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = drop_redundant(_tokens(text))  # (chains' grouping: see .parens)
        self.i = 0
        self.depth = 0  # parentheses, NOT and signs open around the current token

    def nest(self) -> None:
        """Enter one more nested level at the current token (refused past MAX_DEPTH)."""
        if self.depth >= MAX_DEPTH:
            raise self.fail(_TOO_DEEP)
        self.depth += 1

    def peek(self) -> Token:
        return self.toks[self.i]

    def fail(self, expected: str) -> SelectorError:
        tok = self.peek()
        return SelectorError(self.text, tok[2], expected, _describe(tok))

    def take(self, kind: str, value: Any = None) -> Token | None:
        tok = self.toks[self.i]
        if tok[0] == kind and (value is None or tok[1] == value):
            self.i += 1
            return tok
        return None

    def expect(self, kind: str, value: Any, expected: str) -> Token:
        tok = self.take(kind, value)
        if tok is None:
            raise self.fail(expected)
        return tok

    # -- boolean layer --------------------------------------------------------------------

    def condition(self, node: Node, pos: int) -> Node:
        """``node``, which must be a condition: a number or a string where AND, OR, NOT or
        the whole selector need true/false is refused where it starts (``pos``). A
        parenthesized operand alone may be a value: ``(qty + 1) > 2``."""
        if node[0] in ("arith", "neg") or (node[0] == "lit" and type(node[1]) is not bool):
            raise SelectorError(
                self.text, pos, "a condition (comparison, predicate, boolean header, TRUE/FALSE)"
            )
        return node

    def or_expr(self) -> Node:
        return self.chain("OR", self.and_expr)

    def and_expr(self) -> Node:
        return self.chain("AND", self.not_expr)

    def chain(self, keyword: str, operand: Callable[[], Node]) -> Node:
        """Operands joined by ``keyword``: one flat node, built in a loop (a parenthesized
        chain of the same kind is spliced in)."""
        pos = self.peek()[2]
        node = operand()
        if self.peek()[:2] != ("kw", keyword):
            return node
        kind = keyword.lower()
        parts: list[Node] = []
        while True:
            self.condition(node, pos)
            parts.extend(node[1:] if node[0] == kind else (node,))
            if not self.take("kw", keyword):
                return (kind, *parts)
            pos = self.peek()[2]
            node = operand()

    def not_expr(self) -> Node:
        if self.peek()[:2] == ("kw", "NOT"):
            self.nest()
            self.i += 1
            pos = self.peek()[2]
            node = ("not", self.condition(self.not_expr(), pos))
            self.depth -= 1
            return node
        return self.predicate()

    def predicate(self) -> Node:
        start = self.peek()[2]
        left = self.sum()
        tok = self.peek()
        if tok[0] == "op" and tok[1] in _COMPARE:
            self.i += 1
            return ("cmp", tok[1], left, self.sum())
        if self.take("kw", "IS"):
            negated = bool(self.take("kw", "NOT"))
            self.expect("kw", "NULL", "NULL (after IS [NOT])")
            return ("null", negated, self._ident(left, start, "IS NULL"))
        negated = bool(self.take("kw", "NOT"))
        if self.take("kw", "BETWEEN"):
            low = self.sum()
            self.expect("kw", "AND", "AND (of BETWEEN ... AND ...)")
            return ("between", negated, left, low, self.sum())
        if self.take("kw", "IN"):
            return ("in", negated, self._ident(left, start, "IN"), self.in_list())
        if self.take("kw", "LIKE"):
            return ("like", negated, self._ident(left, start, "LIKE"), *self.like_rest())
        if negated:
            raise self.fail("BETWEEN, IN or LIKE (after NOT)")
        return left

    def _ident(self, node: Node, pos: int, what: str) -> Node:
        if node[0] != "id":
            raise SelectorError(self.text, pos, f"a header name (the left side of {what})")
        return node

    def in_list(self) -> tuple[Any, ...]:
        self.expect("op", "(", "'(' (the list of IN)")
        values = [self.literal()]
        while self.take("op", ","):
            values.append(self.literal())
        self.expect("op", ")", "',' or ')' (in the list of IN)")
        return tuple(values)

    def literal(self) -> Any:
        sign = -1 if self.take("op", "-") else 1
        tok = self.peek()
        if tok[0] == "num":
            self.i += 1
            return sign * tok[1]
        if sign == 1 and tok[0] == "str":
            self.i += 1
            return tok[1]
        if sign == 1 and tok[0] == "kw" and tok[1] in ("TRUE", "FALSE"):
            self.i += 1
            return tok[1] == "TRUE"
        raise self.fail("a literal (string, number, TRUE or FALSE)")

    def like_rest(self) -> tuple[str, str | None]:
        tok = self.take("str")
        if tok is None:
            raise self.fail("a string (the pattern of LIKE)")
        escape = None
        if self.take("kw", "ESCAPE"):
            esc = self.take("str")
            if esc is None or len(esc[1]) != 1:
                if esc is not None:
                    self.i -= 1
                raise self.fail("a one-character string (the ESCAPE of LIKE)")
            escape = esc[1]
        return tok[1], escape

    # -- arithmetic layer -----------------------------------------------------------------

    def sum(self) -> Node:
        node = self.product()
        while True:
            tok = self.peek()
            if tok[0] != "op" or tok[1] not in ("+", "-"):
                return node
            self.i += 1
            node = ("arith", tok[1], node, self.product())

    def product(self) -> Node:
        node = self.unary()
        while True:
            tok = self.peek()
            if tok[0] != "op" or tok[1] not in ("*", "/"):
                return node
            self.i += 1
            node = ("arith", tok[1], node, self.unary())

    def unary(self) -> Node:
        tok = self.peek()
        if tok[0] != "op" or tok[1] not in ("-", "+"):
            return self.primary()
        self.nest()
        self.i += 1
        inner = self.unary()
        self.depth -= 1
        if tok[1] == "+":
            return inner
        if inner[0] == "lit" and type(inner[1]) in (int, float):
            return ("lit", -inner[1])  # a negative literal, not an operation
        return ("neg", inner)

    def primary(self) -> Node:
        tok = self.peek()
        kind, value, _ = tok
        if kind in ("num", "str"):
            self.i += 1
            return ("lit", value)
        if kind == "kw" and value in ("TRUE", "FALSE"):
            self.i += 1
            return ("lit", value == "TRUE")
        if kind == "word":
            self.i += 1
            return ("id", value)
        if kind == "op" and value == "(":
            self.nest()
            self.i += 1
            node = self.or_expr()
            self.expect("op", ")", "')'")
            self.depth -= 1
            return node
        raise self.fail("a header name, a literal or '('")


def parse(text: str) -> Node:
    """Parse ``text`` into its tree; :class:`~zbroker.errors.SelectorError` says where and
    what was expected when it is not a selector."""
    if not isinstance(text, str):
        raise SelectorError(str(text), 0, "a selector string")
    if len(text) > MAX_SELECTOR:
        raise SelectorError(text, MAX_SELECTOR, f"at most {MAX_SELECTOR} characters")
    if "\0" in text:
        raise SelectorError(text, text.index("\0"), "no NUL character")
    p = _Parser(text)
    if p.peek()[0] == "end":
        raise p.fail("an expression")
    node = p.or_expr()
    if p.peek()[0] != "end":
        raise p.fail("AND, OR, an operator or the end")
    if depth(node) > MAX_DEPTH:
        raise SelectorError(text, 0, _TOO_DEEP)
    return p.condition(node, 0)


def depth(tree: Node) -> int:
    """How many operations of ``tree`` nest inside one another (a leaf: 0), walked with
    a list, not recursion: the tree is checked before anything recurses into it."""
    deepest = 0
    todo: list[tuple[Node, int]] = [(tree, 0)]
    while todo:
        node, level = todo.pop()
        kind = node[0]
        if kind in ("lit", "id"):
            continue
        level += 1
        deepest = max(deepest, level)
        if kind in ("neg", "not", "and", "or"):
            todo.extend((n, level) for n in node[1:])
        elif kind in ("arith", "cmp", "between"):
            todo.extend((n, level) for n in node[2:])
    return deepest


def _lit(value: Any) -> str:
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def unparse(node: Node) -> str:
    """The canonical text of a tree: every operation parenthesized, keywords upper-case,
    one space between tokens. Selectors that differ only in layout share it."""
    kind = node[0]
    if kind == "lit":
        return _lit(node[1])
    if kind == "id":
        return str(node[1])
    if kind == "neg":
        return f"(- {unparse(node[1])})"
    if kind in ("arith", "cmp"):
        return f"({unparse(node[2])} {node[1]} {unparse(node[3])})"
    if kind in ("and", "or"):
        return "(" + f" {kind.upper()} ".join(unparse(n) for n in node[1:]) + ")"
    if kind == "not":
        return f"(NOT {unparse(node[1])})"
    neg = "NOT " if node[1] else ""
    if kind == "between":
        a, lo, hi = (unparse(n) for n in node[2:])
        return f"({a} {neg}BETWEEN {lo} AND {hi})"
    if kind == "in":
        return f"({node[2][1]} {neg}IN ({', '.join(_lit(v) for v in node[3])}))"
    if kind == "like":
        esc = f" ESCAPE {_lit(node[4])}" if node[4] is not None else ""
        return f"({node[2][1]} {neg}LIKE {_lit(node[3])}{esc})"
    if kind == "null":
        return f"({node[2][1]} IS {neg}NULL)"
    raise ValueError(f"not a selector node: {node!r}")
