"""How long and how deep a selector may be: a flat chain of AND or OR as long as
MAX_SELECTOR allows works (parsed, compiled and evaluated without recursion), nesting past
MAX_DEPTH is a SelectorError at the parser, never a RecursionError anywhere downstream."""

from __future__ import annotations

import inspect
import sys
from typing import Any

import pytest
from hypothesis import given, settings

from tests.selector.test_selectors import conditions, ref_bool
from zbroker.errors import SelectorError
from zbroker.selectors import MAX_DEPTH, MAX_SELECTOR, canonical, selector
from zbroker.selectors.parser import parse, unparse

LETTERS = "abcdefghij"  # boolean headers a..j


def chain(keyword: str, operators: int) -> str:
    """``a KEYWORD b KEYWORD c ...`` with ``operators`` keywords."""
    return f" {keyword} ".join(LETTERS[i % len(LETTERS)] for i in range(operators + 1))


def headers(false: str = "", missing: str = "") -> dict[str, Any]:
    return {c: c not in false for c in LETTERS if c not in missing}


@pytest.mark.parametrize("keyword", ["OR", "AND"])
def test_a_chain_of_600_is_one_flat_node_that_compiles_and_evaluates(keyword: str) -> None:
    text = chain(keyword, 600)
    assert len(text) <= MAX_SELECTOR
    tree = parse(text)
    assert tree[0] == keyword.lower() and len(tree) == 602  # one node, 601 operands
    sel = selector(text)
    assert canonical(sel.text) == sel.text  # the canonical text parses back, flat too
    cases = [
        headers(),
        headers(false=LETTERS),
        headers(false="abcdefghi"),  # only j (the last operand of a chain of 600) TRUE
        headers(false="j"),
        headers(missing="e"),
        headers(false=LETTERS[:9], missing="j"),
        {},
    ]
    for h in cases:
        assert sel(h) is (ref_bool(tree, h) is True), h
    if keyword == "OR":
        want = [True, False, True, True, True, False, False]
    else:
        want = [True, False, False, False, False, False, False]
    assert [sel(h) for h in cases] == want


def test_grouping_a_chain_of_one_kind_does_not_change_its_canonical_text() -> None:
    flat = "((a = 1) AND (b = 2) AND (c = 3))"
    for text in ("a = 1 AND b = 2 AND c = 3", "(a=1 AND b=2) AND c=3", "a=1 AND (b=2 AND c=3)"):
        assert canonical(text) == flat
    # another operator's chain stays a group of its own
    assert canonical("(a OR b) AND c OR d") == "(((a OR b) AND c) OR d)"
    assert canonical("((a = 1) AND (b = 2)) AND (c = 3)") == flat  # an older canonical text


@pytest.mark.parametrize(("opening", "closing"), [("(", ")"), ("NOT ", ""), ("- ", ""), ("+ ", "")])
def test_nesting_stops_at_max_depth_with_a_selector_error(opening: str, closing: str) -> None:
    def nested(levels: int) -> str:
        inner = "a" if opening == "NOT " else "a = 1"
        return opening * levels + inner + closing * levels

    text = nested(MAX_DEPTH - 1)
    for h in ({"a": True}, {"a": 1}, {"a": -1}, {}):
        assert selector(text)(h) is (ref_bool(parse(text), h) is True)
    with pytest.raises(SelectorError) as info:
        selector(nested(MAX_DEPTH + 1))
    assert f"at most {MAX_DEPTH} levels of nesting" in str(info.value)
    assert info.value.position == len(opening) * MAX_DEPTH  # where the level past it opens


def test_an_arithmetic_chain_is_nesting_too() -> None:
    ok = "a" + " + a" * (MAX_DEPTH - 1) + " = 0"  # the comparison is one more level
    assert selector(ok)({"a": 0}) is True
    with pytest.raises(SelectorError, match=f"at most {MAX_DEPTH} levels of nesting"):
        selector("a" + " + a" * MAX_DEPTH + " = 0")


@pytest.mark.parametrize(
    "text",
    [
        "(" * 2000 + "a = 1" + ")" * 2000,
        "NOT " * 1000 + "a",
        "- " * 2000 + "a = 1",
        "a" + "+a" * 2000 + " = 1",
        # parenthesized arithmetic chains inside one another: each within the parser's
        # limit, the tree far deeper than any of them
        "(" * 40 + "a" + ("+a" * 40 + ")") * 40 + " = 1",
    ],
)
def test_any_selector_that_fits_is_compiled_or_refused_never_a_recursion_error(
    text: str,
) -> None:
    assert len(text) <= MAX_SELECTOR
    with pytest.raises(SelectorError):
        selector(text)


def test_a_recursion_error_is_turned_into_a_selector_error() -> None:
    text = "(" * (MAX_DEPTH - 1) + "qty = 1" + ")" * (MAX_DEPTH - 1)

    def deep(n: int) -> Any:
        return deep(n - 1) if n else selector(text)

    # called with too few frames left for the parser: the last defence of selector()
    frames = sys.getrecursionlimit() - len(inspect.stack(0)) - 100
    with pytest.raises(SelectorError, match="levels of nesting"):
        deep(frames)
    assert selector(text)({"qty": 1}) is True  # nothing cached by the failure


def old_canonical(node: Any) -> str:
    """The canonical text of the releases before flat chains: every AND and OR binary,
    nested to the left, each in its own parentheses (as durables stored it)."""
    if node[0] in ("and", "or"):
        text = old_canonical(node[1])
        for part in node[2:]:
            text = f"({text} {node[0].upper()} {old_canonical(part)})"
        return text
    if node[0] == "not":
        return f"(NOT {old_canonical(node[1])})"
    return unparse(node)


@settings(max_examples=300, deadline=None)
@given(conditions)
def test_the_old_canonical_text_parses_to_the_same_tree(tree: Any) -> None:
    assert parse(old_canonical(tree)) == tree


@pytest.mark.parametrize("keyword", ["OR", "AND"])
def test_a_long_chain_stored_in_the_old_canonical_text_still_reads(keyword: str) -> None:
    """A durable stored its selector's canonical text: before flat chains, a chain of n
    terms nested n - 1 parentheses deep. Those of 65 terms and more (MAX_DEPTH 64) were
    refused on reading, so the durable took every message and its client's reopen was
    refused as a different selector."""
    for n in (MAX_DEPTH + 1, 260):
        flat_text = f" {keyword} ".join(f"(a = {i})" for i in range(n))
        text = old_canonical(parse(flat_text))
        assert len(text) <= MAX_SELECTOR and text.count("(") > MAX_DEPTH
        assert canonical(text) == canonical(flat_text)
        if keyword == "OR":
            assert selector(text)({"a": n - 1}) and not selector(text)({"a": n})
