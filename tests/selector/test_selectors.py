"""The selector language: a truth table of its three-valued logic, a hypothesis property
against a separate reference evaluator, the canonical text, and the error messages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker.errors import SelectorError
from zbroker.selectors import canonical, selector
from zbroker.selectors.parser import Node, parse, unparse

T, F, U = True, False, None


# -- a reference evaluator: the JMS rules written plainly, sharing no code ----------------


def ref(node: Node, h: dict[str, Any]) -> Any:
    """The value of ``node`` (None: NULL/UNKNOWN), interpreted directly from the rules."""
    kind = node[0]

    def isnum(v: Any) -> bool:
        return type(v) in (int, float)

    if kind == "lit":
        return node[1]
    if kind == "id":
        return h.get(node[1])
    if kind == "neg":
        v = ref(node[1], h)
        return -v if isnum(v) else None
    if kind == "arith":
        a, b = ref(node[2], h), ref(node[3], h)
        if not (isnum(a) and isnum(b)) or (node[1] == "/" and b == 0):
            return None
        return {"+": a + b, "-": a - b, "*": a * b}.get(node[1]) if node[1] != "/" else a / b
    if kind in ("and", "or", "not"):
        return ref_logic(node, h)
    return ref_predicate(node, h)


def ref_bool(node: Node, h: dict[str, Any]) -> Any:
    v = ref(node, h)
    if node[0] == "id":
        return v if v is None or type(v) is bool else False
    return v


def ref_logic(node: Node, h: dict[str, Any]) -> Any:
    if node[0] == "not":
        v = ref_bool(node[1], h)
        return None if v is None else not v
    vs = [ref_bool(n, h) for n in node[1:]]  # (a chain: two operands or more)
    if node[0] == "and":
        return F if any(v is F for v in vs) else (U if None in vs else T)
    return T if any(v is T for v in vs) else (U if None in vs else F)


def cls(v: Any) -> str:
    return {int: "n", float: "n", str: "s", bool: "b"}.get(type(v), "?")


def ref_predicate(node: Node, h: dict[str, Any]) -> Any:
    kind = node[0]
    if kind == "null":
        return (h.get(node[2][1]) is None) != node[1]
    if kind == "cmp":
        a, b = ref(node[2], h), ref(node[3], h)
        if a is None or b is None:
            return None
        if node[1] in ("=", "<>"):
            same = cls(a) == cls(b) != "?" and a == b
            return same if node[1] == "=" else not same
        if cls(a) != "n" or cls(b) != "n":
            return False
        return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[node[1]]
    if kind == "between":
        v, lo, hi = (ref(n, h) for n in node[2:])
        r = (
            None
            if None in (v, lo, hi)
            else all(cls(x) == "n" for x in (v, lo, hi)) and lo <= v <= hi
        )
    elif kind == "in":
        v = h.get(node[2][1])
        r = None if v is None else any(cls(v) == cls(x) != "?" and v == x for x in node[3])
    else:  # like
        v = h.get(node[2][1])
        r = None if v is None else type(v) is str and ref_like(node[3], node[4], v)
    return None if r is None else r != node[1]


def ref_like(pattern: str, escape: str | None, s: str) -> bool:
    """LIKE by recursion over the pattern (no regex)."""
    if not pattern:
        return not s
    c = pattern[0]
    if escape is not None and c == escape and len(pattern) > 1:
        return bool(s) and s[0] == pattern[1] and ref_like(pattern[2:], escape, s[1:])
    if c == "%":
        return any(ref_like(pattern[1:], escape, s[i:]) for i in range(len(s) + 1))
    if c == "_":
        return bool(s) and ref_like(pattern[1:], escape, s[1:])
    return bool(s) and s[0] == c and ref_like(pattern[1:], escape, s[1:])


# -- the truth table ------------------------------------------------------------------------

#: headers where ``t`` is TRUE, ``f`` FALSE and ``u`` (missing) UNKNOWN
TRUTH = {"t": True, "f": False}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("t", T), ("f", F), ("u", U),
        ("NOT t", F), ("NOT f", T), ("NOT u", U),
        ("t AND t", T), ("t AND f", F), ("t AND u", U),
        ("f AND t", F), ("f AND f", F), ("f AND u", F),
        ("u AND t", U), ("u AND f", F), ("u AND u", U),
        ("t OR t", T), ("t OR f", T), ("t OR u", T),
        ("f OR t", T), ("f OR f", F), ("f OR u", U),
        ("u OR t", T), ("u OR f", U), ("u OR u", U),
    ],
)  # fmt: skip
def test_three_valued_truth_table(text: str, value: bool | None) -> None:
    tree = parse(text)
    assert ref_bool(tree, TRUTH) is value
    assert selector(text)(TRUTH) is (value is True)


H = {"region": "EU", "qty": 150, "price": 9.5, "name": "ab_c%d", "ok": True, "n": None}


@pytest.mark.parametrize(
    ("text", "selected"),
    [
        ("region = 'EU' AND qty > 100", True),
        ("region = 'US' OR qty > 100", True),
        ("region <> 'EU'", False),
        ("missing = 'EU'", False),
        ("NOT (missing = 'EU')", False),  # UNKNOWN stays UNKNOWN under NOT
        ("missing IS NULL", True),
        ("n IS NULL AND region IS NOT NULL", True),
        ("qty BETWEEN 100 AND 150", True),
        ("qty NOT BETWEEN 100 AND 150", False),
        ("qty * 2 - 50 = 250", True),
        ("-qty < 0 AND +qty = 150", True),
        ("price / 0 > 1 OR TRUE", True),  # division by zero is UNKNOWN, not an error
        ("price / 0 > 1", False),
        ("region IN ('EU', 'US')", True),
        ("region NOT IN ('EU', 'US')", False),
        ("qty IN (150)", True),
        ("ok IN (1)", False),  # a boolean is not the number 1
        ("ok = TRUE AND ok", True),
        ("qty = '150'", False),  # different types are not equal
        ("qty <> '150'", True),
        ("region > 'A'", False),  # strings compare with = and <> only
        ("name LIKE 'ab%'", True),
        ("name LIKE 'a__c%d'", True),
        ("name LIKE 'ab!_c!%d' ESCAPE '!'", True),
        ("name LIKE 'abx_c!%d' ESCAPE '!'", False),
        ("name NOT LIKE '%z%'", True),
        ("qty LIKE '1%'", False),  # LIKE applies to strings
        ("region = 'EU' and QTY > 100", False),  # keywords any case; names exact
        ("price >= 9.5 AND price <= 95e-1", True),
    ],
)
def test_selects(text: str, selected: bool) -> None:
    assert selector(text)(H) is selected
    assert (ref_bool(parse(text), H) is True) is selected


def test_missing_headers_map() -> None:
    assert selector("a IS NULL")(None) is True
    assert selector("a = 1")(None) is False


# -- the property: compiled closure == reference, and printing round-trips ----------------

NAMES = ["a", "b", "c"]
values = st.one_of(
    st.none(),
    st.integers(-5, 5),
    st.sampled_from([0.5, -2.0, 1e3]),
    st.sampled_from(["", "x", "ab", "a_b", "%", "it's"]),
    st.booleans(),
    st.just([1, 2]),
)
literal = st.one_of(
    st.integers(-5, 5), st.sampled_from([0.5, -2.0, 1e3]), st.sampled_from(["x", "ab", "", "a'b"])
)
ident = st.sampled_from(NAMES).map(lambda n: ("id", n))
arith = st.recursive(
    st.one_of(ident, literal.map(lambda v: ("lit", v))),
    lambda inner: st.one_of(
        st.tuples(st.just("arith"), st.sampled_from("+-*/"), inner, inner),
        st.tuples(st.just("neg"), inner).filter(lambda n: n[1][0] != "lit"),
    ),
    max_leaves=4,
)
predicate = st.one_of(
    st.tuples(st.just("cmp"), st.sampled_from(["=", "<>", "<", ">", "<=", ">="]), arith, arith),
    st.tuples(st.just("between"), st.booleans(), arith, arith, arith),
    st.tuples(st.just("in"), st.booleans(), ident, st.lists(literal, min_size=1).map(tuple)),
    st.tuples(
        st.just("like"),
        st.booleans(),
        ident,
        st.text(alphabet="ab%_!'", max_size=5),
        st.sampled_from([None, "!"]),
    ),
    st.tuples(st.just("null"), st.booleans(), ident),
    ident,
    st.booleans().map(lambda b: ("lit", b)),
)


def flat(kind: str, operands: list[Node]) -> Node:
    """A chain as the parser builds it: an operand that is a chain of the same kind is
    spliced in (AND and OR are associative)."""
    parts: list[Node] = []
    for n in operands:
        parts.extend(n[1:] if n[0] == kind else (n,))
    return (kind, *parts)


conditions = st.recursive(
    predicate,
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=4)).map(
            lambda t: flat(t[0], t[1])
        ),
        st.tuples(st.just("not"), inner),
    ),
    max_leaves=6,
)
headers = st.dictionaries(st.sampled_from(NAMES), values)


@settings(max_examples=400, deadline=None)
@given(conditions, headers)
def test_compiled_agrees_with_the_reference(tree: Node, h: dict[str, Any]) -> None:
    text = unparse(tree)
    assert parse(text) == tree  # the canonical text parses back to the same tree
    sel = selector(text)
    assert sel.text == text
    assert sel(h) is (ref_bool(tree, h) is True)


@settings(max_examples=100, deadline=None)
@given(conditions)
def test_layout_and_keyword_case_share_the_canonical_text(tree: Node) -> None:
    text = unparse(tree)
    sloppy = re.sub(
        r"\b(AND|OR|NOT|IN|LIKE|ESCAPE|BETWEEN|IS|NULL)\b", lambda m: m[0].lower(), text
    )
    assert canonical("  " + sloppy.replace(" ", "  ") + " ") == text


# -- errors: where, and what was expected --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "position", "expected"),
    [
        ("", 0, "an expression"),
        ("a =", 3, "a header name, a literal or '('"),
        ("a = 1 +", 7, "a header name, a literal or '('"),
        ("a LIKE 5", 7, "a string (the pattern of LIKE)"),
        ("a LIKE 'x' ESCAPE 'ab'", 18, "a one-character string (the ESCAPE of LIKE)"),
        ("a IN (1,", 8, "a literal (string, number, TRUE or FALSE)"),
        ("a IN (1 2)", 8, "',' or ')' (in the list of IN)"),
        ("qty + 1", 0, "a condition"),
        ("a = 1 AND 2", 10, "a condition"),
        ("a BETWEEN 1", 11, "AND (of BETWEEN ... AND ...)"),
        ("'abc", 0, "a closing quote for this string"),
        ("a # 1", 2, "an identifier, literal or operator"),
        ("a NOT 3", 6, "BETWEEN, IN or LIKE (after NOT)"),
        ("1 LIKE 'x'", 0, "a header name (the left side of LIKE)"),
        ("(a = 1", 6, "')'"),
        ("a = 1 b", 6, "AND, OR, an operator or the end"),
        ("a IS 1", 5, "NULL (after IS [NOT])"),
        ("a = 1e999", 4, "a finite number"),
        ("a = 'x\0'", 6, "no NUL character"),
    ],
)
def test_errors_say_where_and_what_was_expected(text: str, position: int, expected: str) -> None:
    with pytest.raises(SelectorError) as info:
        selector(text)
    err = info.value
    assert err.position == position
    assert err.expected.startswith(expected)
    assert f"at position {position}: expected {expected}" in str(err)
    assert str(err).splitlines()[-1] == "  " + " " * position + "^"


def test_error_is_a_value_error_of_the_tree() -> None:
    from zbroker.errors import ZBrokerError

    with pytest.raises(ValueError):
        selector("a ==")
    assert issubclass(SelectorError, ZBrokerError)
