"""What the tests of the link frames' codec (``tests/test_wire_links.py``,
``tests/test_wire_forward.py``) share: Hypothesis strategies of valid link-frame values
(the map frames, ADVERT entries, MSGS messages, any frame of a link type) and of any msgpack
value, and :func:`protocol_error_only`, which lets a checker raise nothing but a
ProtocolError with a documented reason."""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import msgpack
from hypothesis import strategies as st

from zbroker import wire
from zbroker.const import PROTOCOL_VERSION
from zbroker.errors import ProtocolError

INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
_FLOAT = st.floats(allow_nan=False)  # NaN != NaN: round trips compare with ==
_TEXT = st.text(max_size=20)
_ID = st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=20)
_LEAF = st.one_of(st.none(), st.booleans(), INT64, _FLOAT, _TEXT, st.binary(max_size=20))
# what msgpack round-trips to an equal value (lists, not tuples; maps with str keys)
_VALUE = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=6,
)
# any msgpack value, including maps with non-string keys and ext types: for fuzzing
ANY = st.recursive(
    st.one_of(_LEAF, st.builds(msgpack.ExtType, st.integers(0, 127), st.binary(max_size=8))),
    lambda inner: st.one_of(
        st.lists(inner, max_size=6),
        st.dictionaries(
            st.one_of(st.text(max_size=4), st.binary(max_size=4), INT64), inner, max_size=4
        ),
    ),
    max_leaves=10,
)
_PATTERNS = st.lists(_TEXT, max_size=3)
_SECONDS = st.floats(min_value=0.001, max_value=86_000, allow_nan=False)

_HELLO = st.fixed_dictionaries(
    {
        "id": _ID,
        "incarnation": INT64,
        "group": _ID,
        "version": st.just(PROTOCOL_VERSION),
        "name": _ID,
        "duplex": st.booleans(),
        "ttl": st.integers(1, 255),
        "conduit": st.booleans(),
        "include": _PATTERNS,
        "exclude": _PATTERNS,
        "static": _PATTERNS,
        "heartbeat_interval": _SECONDS,
        "heartbeat_timeout": _SECONDS,
    }
)
_WELCOME = st.fixed_dictionaries(
    {"id": _ID, "incarnation": INT64, "group": _ID, "version": st.just(PROTOCOL_VERSION)}
)
_REFUSE = st.fixed_dictionaries({"reason": _TEXT, "retry": st.booleans()})
_BYE = st.fixed_dictionaries({"reason": _TEXT})
MAP_FRAMES = st.one_of(
    st.tuples(st.just(wire.LINK_HELLO), _HELLO),
    st.tuples(st.just(wire.LINK_WELCOME), _WELCOME),
    st.tuples(st.just(wire.LINK_REFUSE), _REFUSE),
    st.tuples(st.just(wire.BYE), _BYE),
)
ADVERT_ENTRY = st.tuples(_TEXT, _ID, st.one_of(st.none(), st.lists(_ID, max_size=4))).map(list)
_HEADERS = st.one_of(st.none(), st.dictionaries(st.text(max_size=8), _VALUE, max_size=4))
U63 = st.integers(min_value=0, max_value=2**63 - 1)
_TS = st.floats(min_value=-1e15, max_value=1e15, exclude_min=True, exclude_max=True)
MSG = st.tuples(
    _TEXT,  # topic (the node checks topic rules, not the codec)
    st.binary(max_size=40),  # payload
    st.sampled_from([wire.FMT_BYTES, wire.FMT_MSGPACK]),
    _HEADERS,
    _ID,  # origin
    U63,  # incarnation (what the store can hold: a signed 64-bit INTEGER)
    U63,  # seq
    st.one_of(_TS, st.integers(-(10**15) + 1, 10**15 - 1)),  # ts (finite, |ts| < 1e15)
    st.lists(_ID, max_size=4),  # path
    st.one_of(st.none(), st.lists(_ID, max_size=4)),  # targets
).map(list)


def valid_frame() -> st.SearchStrategy[bytes]:
    """An encoded valid frame of any link type."""
    return st.one_of(
        MAP_FRAMES.map(lambda t: wire.encode_link(*t)),
        st.just(wire.encode_link(wire.HEARTBEAT)),
        st.tuples(st.booleans(), st.lists(ADVERT_ENTRY, max_size=4)).map(
            lambda t: wire.encode_link(wire.ADVERT, *t)
        ),
        st.lists(MSG, max_size=4).map(lambda batch: wire.encode_link(wire.MSGS, batch)),
    )


def protocol_error_only(fn: Callable[[], Any], reasons: set[str]) -> bool:
    """True if ``fn()`` returned; False if it raised ProtocolError with one of ``reasons``
    (any other exception propagates and fails the test)."""
    try:
        fn()
    except ProtocolError as exc:
        assert exc.reason in reasons, exc.reason
        return False
    return True
