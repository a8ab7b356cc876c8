"""ADVERT entries carrying selectors (engine rule 7): round trip through the link frame
encoder the node uses, and malformed selector fields raise only ProtocolError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zbroker import selectors, wire
from zbroker.errors import ProtocolError
from zbroker.links.flush import with_selectors
from zbroker.links.outbox import advert_chunks

TEXTS = ["(a = 1)", "((r = 'x') OR (q > 2))", "(n IS NULL)"]
keys = st.tuples(st.sampled_from(["A.>", "B.*", "C"]), st.sampled_from(["N1", "N2"]))


@settings(max_examples=200, deadline=None)
@given(
    entries=st.dictionaries(keys, st.one_of(st.none(), st.tuples(st.text("NXY", min_size=1)))),
    selected=st.dictionaries(keys, st.frozensets(st.sampled_from(TEXTS), min_size=1)),
    sticky=st.sets(keys),
)
def test_selectors_round_trip(
    entries: dict[tuple[str, str], Any],
    selected: dict[tuple[str, str], frozenset[str]],
    sticky: set[tuple[str, str]],
) -> None:
    rows: list[list[Any]] = []
    for (p, o), hops in entries.items():
        path = None if hops is None else [o, *hops]  # a path starts at its origin
        rows.append([p, o, path, True] if (p, o) in sticky and path else [p, o, path])
    with_selectors(rows, selected)
    (chunk,) = advert_chunks(rows, 1 << 20)
    value = wire.decode_frame(wire.encode_link(wire.ADVERT, True, chunk))
    full, got, got_sticky, got_selected = wire.decode_advert_entries(value)
    assert full is True and len(got) == len(entries)
    assert got_selected == {
        k: v for k, v in selected.items() if k in entries and entries[k] is not None
    }
    assert got_sticky == {k for k in sticky if k in entries and entries[k] is not None}


@pytest.mark.parametrize(
    ("selectors", "reason"),
    [("(a = 1)", "bad_type"), ([1], "bad_type"), ([], "bad_advert")],
)
def test_malformed_selectors_are_protocol_errors(selectors: Any, reason: str) -> None:
    value = [wire.ADVERT, False, [["A", "N1", ["N1"], False, selectors]]]
    with pytest.raises(ProtocolError) as info:
        wire.decode_advert_entries(value)
    assert info.value.reason == reason


#: a valid selector (under MAX_SELECTOR characters) whose canonical text, what nodes
#: advertise, is longer than MAX_SELECTOR: 250 times "a=1 AND b=2", joined by OR
LONG_SOURCE = " OR ".join(["a=1 AND b=2"] * 250)
LONG_CANONICAL = "(" + " OR ".join(["((a = 1) AND (b = 2))"] * 250) + ")"


@pytest.mark.parametrize("text", ["a =", "a = 1e999", LONG_CANONICAL], ids=["bad", "inf", "long"])
def test_an_entry_whose_selector_does_not_compile_is_taken_without_it(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """Was: the whole ADVERT was refused (bad_advert), and with it every other entry of
    the frame, for good (a node does not advertise again what it said). A valid
    selector's canonical text may not parse at the next node (longer than MAX_SELECTOR):
    the entry widens (its origin is sent more), the frame's other entries stand."""
    monkeypatch.setattr(selectors, "_cache", {})  # the next node: nothing of ours cached
    value = [
        wire.ADVERT,
        True,
        [["A.>", "N1", ["N1"], True, [text]], ["B.x", "N1", ["N1"]], ["C", "N1", ["N1"], False]],
    ]
    full, entries, sticky, selected, held = wire.decode_advert_held(value)
    assert full is True and selected == {}
    assert entries == (("A.>", "N1", ("N1",)), ("B.x", "N1", ("N1",)), ("C", "N1", ("N1",)))
    assert sticky == {("A.>", "N1")} and held == frozenset()


def test_the_long_selector_is_one_a_client_may_subscribe_with(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(selectors, "_cache", {})
    assert len(LONG_SOURCE) <= selectors.MAX_SELECTOR < len(LONG_CANONICAL)
    assert selectors.selector(LONG_SOURCE).text == LONG_CANONICAL


def test_a_withdrawal_ignores_selectors_and_layout_is_canonicalized() -> None:
    value = [
        wire.ADVERT,
        False,
        [["A", "N1", None, False, ["a=1"]], ["B", "N1", ["N1"], False, ["a=1"]]],
    ]
    _, entries, _, selected = wire.decode_advert_entries(value)
    assert entries == (("A", "N1", None), ("B", "N1", ("N1",)))
    assert selected == {("B", "N1"): frozenset({"(a = 1)"})}


@settings(max_examples=300, deadline=None)
@given(
    entry=st.lists(
        st.one_of(
            st.text(max_size=5),
            st.none(),
            st.booleans(),
            st.lists(st.one_of(st.text(max_size=8), st.integers()), max_size=3),
        ),
        min_size=3,
        max_size=6,
    )
)
def test_random_entries_raise_only_protocol_error(entry: list[Any]) -> None:
    try:
        wire.decode_advert_entries([wire.ADVERT, False, [entry]])
    except ProtocolError as exc:
        assert exc.reason in {"bad_shape", "bad_type", "bad_advert"}
