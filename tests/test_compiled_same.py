"""The compiled checks and their Python sources answer alike (zbroker/_compiled.py).

A node that compiled its modules and one that could not are peers on one network: a
frame one accepts, the other must accept with the same result, and what one refuses, the
other must refuse for the same reason. Each case runs the module zbroker imported (an
extension where the build compiled it) and the same module executed from its ``.py``
source on the same inputs, valid and malformed, and compares everything they return.
"""

from __future__ import annotations

import copy
import string
from pathlib import Path
from types import ModuleType
from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

import zbroker
from tests.helpers import from_source
from zbroker import _compiled
from zbroker.client import messages as client_messages
from zbroker.wire import link as wire_link
from zbroker.wire import publish as wire_publish
from zbroker.wire import runs as wire_runs

ROOT = Path(zbroker.__file__).resolve().parent.parent


LINK, PUBLISH, MESSAGES, RUNS = (
    from_source(m) for m in (wire_link, wire_publish, client_messages, wire_runs)
)

_ID = st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=12)
_TOPIC = st.one_of(st.sampled_from(["A.B", "PRICE.X", "A..B", "$ZB.X", "A.*", ""]), _ID)
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),  # what msgpack can carry
    st.floats(),  # NaN and infinities too: a range check must refuse them alike
    st.text(max_size=6),
    st.binary(max_size=8),
)
_ANY = st.recursive(_LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3)), max_leaves=6)
_HEADERS = st.one_of(st.none(), st.dictionaries(st.text(max_size=4), _LEAF, max_size=3))
_GOOD_MSG = st.tuples(
    _TOPIC,
    st.binary(max_size=16),
    st.sampled_from([0, 1]),
    _HEADERS,
    _ID,
    st.integers(0, 2**63 - 1),
    st.integers(0, 2**63 - 1),
    st.one_of(st.floats(-1e15, 1e15), st.integers(-(10**15), 10**15)),
    st.lists(_ID, max_size=3),
    st.one_of(st.none(), st.lists(_ID, max_size=3)),
).map(list)


@st.composite
def _msg(draw: st.DrawFn) -> Any:
    """A MSGS entry: valid, or valid with one field replaced by anything, or anything."""
    m = draw(_GOOD_MSG)
    kind = draw(st.integers(0, 3))
    if kind == 1:
        m[draw(st.integers(0, 9))] = draw(_ANY)
    elif kind == 2:
        m = m[: draw(st.integers(0, 11))]
    elif kind == 3:
        return draw(_ANY)
    return m


def _run_check_msgs(module: ModuleType, batch: list[Any], topics: bool) -> Any:
    batch = copy.deepcopy(batch)
    errors: list[tuple[str, str]] = []
    module.check_msgs(batch, (set(), set(), set() if topics else None), errors)
    return batch, errors


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(_msg(), max_size=8), topics=st.booleans())
def test_check_msgs_compiled_and_source_agree(batch: list[Any], topics: bool) -> None:
    assert _run_check_msgs(wire_link, batch, topics) == _run_check_msgs(LINK, batch, topics)


@st.composite
def _run(draw: st.DrawFn) -> Any:
    """A MSGR run: valid, or with a shared field, an entry's field or an entry replaced by
    anything, or cut short, or anything."""
    m = draw(_GOOD_MSG)
    entries = [[e[1], e[2], e[3], e[6], e[7]] for e in draw(st.lists(_GOOD_MSG, max_size=4))]
    return _spoiled(draw, [m[0], m[4], m[5], m[8], m[9], entries], entries, 5)


def _spoiled(draw: st.DrawFn, run: list[Any], entries: list[Any], fields: int) -> Any:
    """``run`` (its ``entries`` of ``fields`` fields each) valid, or with a field of its
    own, an entry's field or an entry replaced by anything, or cut short, or anything."""
    kind = draw(st.integers(0, 5))
    if kind == 1:
        run[draw(st.integers(0, len(run) - 1))] = draw(_ANY)
    elif kind == 2 and entries:
        entry = entries[draw(st.integers(0, len(entries) - 1))]
        entry[draw(st.integers(0, fields - 1))] = draw(_ANY)
    elif kind == 3 and entries:
        entries[draw(st.integers(0, len(entries) - 1))] = draw(_ANY)
    elif kind == 4:
        return run[: draw(st.integers(0, len(run) - 1))]
    elif kind == 5:
        return draw(_ANY)
    return run


def _run_check_runs(module: ModuleType, runs: list[Any], topics: bool) -> Any:
    runs = copy.deepcopy(runs)
    errors: list[tuple[str, str]] = []
    held = module.held(runs)
    module.check_runs(runs, (set(), set(), set() if topics else None), errors)
    return held, runs, errors


@settings(max_examples=300, deadline=None)
@given(runs=st.lists(_run(), max_size=5), topics=st.booleans())
def test_check_runs_compiled_and_source_agree(runs: list[Any], topics: bool) -> None:
    assert _run_check_runs(wire_runs, runs, topics) == _run_check_runs(RUNS, runs, topics)


def _publish_frame(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 2))
    if kind == 0:  # what the client sends: [topic, payload, fmt(, headers)]
        value: Any = [draw(_TOPIC), draw(st.binary(max_size=8)), draw(st.sampled_from([0, 1]))]
        if draw(st.booleans()):
            value.append(draw(_HEADERS))
    elif kind == 1:
        value = draw(st.lists(_ANY, max_size=5))
    else:
        return draw(st.binary(max_size=24))  # not necessarily msgpack at all
    packed: bytes = msgpack.packb(value)
    return packed


@st.composite
def _publish_raw(draw: st.DrawFn) -> bytes:
    """A publish socket's frame: one publish, a batch of publish frames, or junk."""
    if draw(st.booleans()):
        return _publish_frame(draw)
    batch: bytes = msgpack.packb([_publish_frame(draw) for _ in range(draw(st.integers(0, 4)))])
    return batch


@st.composite
def _publish_run(draw: st.DrawFn) -> Any:
    """A publish run, valid or spoiled as a MSGR run may be (:func:`_spoiled`)."""
    entries = [
        [draw(st.binary(max_size=4)), draw(st.sampled_from([0, 1])), draw(_HEADERS)]
        for _ in range(draw(st.integers(0, 3)))
    ]
    return _spoiled(draw, [draw(_TOPIC), entries], entries, 3)


@st.composite
def _publish_raw_any(draw: st.DrawFn) -> bytes:
    """A publish socket's frame of any form: those of _publish_raw, or a batch of runs."""
    if draw(st.booleans()):
        return draw(_publish_raw())
    runs: bytes = msgpack.packb([draw(_publish_run()) for _ in range(draw(st.integers(1, 4)))])
    return runs


def _run_publishes(module: ModuleType, raw: bytes, topics: bool) -> Any:
    errors: list[tuple[str, str]] = []
    elements = module.publish_elements(raw, errors)
    if elements and type(elements[0]) is list:  # a batch of runs (as the node tells)
        held = module.check_publish_runs(elements, errors, set())
        return list(elements), held, errors
    values = module.check_publishes(elements, errors, set() if topics else None)
    return list(elements), values, errors


@settings(max_examples=300, deadline=None)
@given(raw=_publish_raw_any(), topics=st.booleans())
def test_publish_checks_compiled_and_source_agree(raw: bytes, topics: bool) -> None:
    # as text: a NaN in headers is not equal to itself, its text is
    compiled, source = (
        _run_publishes(wire_publish, raw, topics),
        _run_publishes(PUBLISH, raw, topics),
    )
    assert repr(compiled) == repr(source)


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.lists(_ANY, min_size=4, max_size=4))))
def test_runs_of_publishes_compiled_and_source_agree(values: list[Any]) -> None:
    one, two = copy.deepcopy(values), copy.deepcopy(values)
    assert repr(wire_publish.runs_of_publishes(one)) == repr(PUBLISH.runs_of_publishes(two))


def _run_envelopes(module: ModuleType, envelopes: list[Any]) -> str:
    """Every field of every message built, or the exception: as text (a NaN decoded
    from a payload is not equal to itself, its text is)."""
    try:
        got = module.messages_from_envelopes("A.>", copy.deepcopy(envelopes))
        return repr([tuple(getattr(m, k) for k in m.__slots__) for m in got])
    except Exception as exc:  # the same exception, with the same words, on both sides
        return repr((type(exc), str(exc)))


_ENVELOPE = st.one_of(
    _GOOD_MSG.map(lambda m: m[:8]),
    st.lists(_ANY, min_size=8, max_size=8),
)


@settings(max_examples=200, deadline=None)
@given(envelopes=st.lists(_ENVELOPE, max_size=5))
def test_delivery_envelopes_compiled_and_source_agree(envelopes: list[Any]) -> None:
    assert _run_envelopes(client_messages, envelopes) == _run_envelopes(MESSAGES, envelopes)


def _run_runs(module: ModuleType, runs: list[Any]) -> str:
    """As :func:`_run_envelopes`, for a delivery frame's runs."""
    try:
        got = module.messages_from_runs("A.>", copy.deepcopy(runs))
        return repr([tuple(getattr(m, k) for k in m.__slots__) for m in got])
    except Exception as exc:
        return repr((type(exc), str(exc)))


_DELIVERY_RUN = st.one_of(
    _GOOD_MSG.map(lambda m: [m[0], m[4], m[5], [[m[1], m[2], m[3], m[6], m[7]]] * 2]),
    st.tuples(_ANY, _ANY, _ANY, st.lists(st.lists(_ANY, min_size=5, max_size=5), min_size=1)).map(
        list
    ),
)


@settings(max_examples=200, deadline=None)
@given(runs=st.lists(_DELIVERY_RUN, max_size=4))
def test_delivery_runs_compiled_and_source_agree(runs: list[Any]) -> None:
    assert _run_runs(client_messages, runs) == _run_runs(MESSAGES, runs)


def test_each_comparison_is_of_the_extension_against_the_source_where_built() -> None:
    # the properties above compare two builds only where zbroker imported the extension:
    # so it must have, wherever a current one is built (CI requires the build)
    for imported, source in (
        (wire_link, LINK),
        (wire_runs, RUNS),
        (wire_publish, PUBLISH),
        (client_messages, MESSAGES),
    ):
        assert source.__file__ is not None and source.__file__.endswith(".py")
        path = ROOT / (imported.__name__.replace(".", "/") + ".py")
        built = _compiled.built_from(path) is True and not _compiled.pure_python()
        assert _compiled.loaded()[imported.__name__] is built, imported.__name__
