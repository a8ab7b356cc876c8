"""What the tests of the client frames' codec (``tests/test_wire*.py``: publish, control
and delivery frames) share: Hypothesis strategies of the values those frames carry, a
valid delivery body, and :func:`error_reason`, the ProtocolError reason a decoder gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import strategies as st

from zbroker import wire
from zbroker.errors import ProtocolError

pack = msgpack.packb

INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_LEAF = st.one_of(
    st.none(),
    st.booleans(),
    INT64,
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
# what msgpack round-trips to an equal value (lists, not tuples; maps with str keys)
VALUE = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=6,
)
HEADERS = st.one_of(st.none(), st.dictionaries(st.text(max_size=10), VALUE, max_size=5))
# text that UTF-8 can carry: no lone surrogates (a str, not a wire value)
TOPIC = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
PATTERN = st.text(
    alphabet=st.characters(exclude_characters="\x00", exclude_categories=["Cs"]),
    min_size=1,
    max_size=40,
)
FMT = st.sampled_from([wire.FMT_BYTES, wire.FMT_MSGPACK])

# any msgpack value, including maps with int keys and ext types: used for fuzzing
ANY_MSGPACK = st.recursive(
    st.one_of(_LEAF, st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=9),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.binary(max_size=4), INT64), inner, max_size=5
        ),
    ),
    max_leaves=8,
)


GOOD_BODY = wire.encode_delivery_body("A", b"", 0, None, "n", 1, 1, 0.0)


def error_reason(decoder: Callable[[bytes], Any], frame: bytes) -> str:
    """The reason of the ProtocolError ``decoder`` raises on ``frame`` (it must raise one)."""
    with pytest.raises(ProtocolError) as info:
        decoder(frame)
    return info.value.reason
