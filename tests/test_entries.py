"""A run's entries written into msgpack bytes without a Packer (zbroker/wire/entries.py).

Where the module is compiled, what :func:`written` returns must be byte for byte what
packing the entries gives, at every boundary of msgpack's encodings (array and bin
headers, each width of an unsigned int, any float); an entry it does not write (headers,
other types, numbers Packer refuses) makes it return None, and the caller packs. Run from
its source it writes nothing.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import zbroker
from zbroker import _compiled
from zbroker.wire import entries as wire_entries
from zbroker.wire.entries import WRITES, numbered, written
from zbroker.wire.heads import publish_run

SOURCE = Path(zbroker.__file__).resolve().parent / "wire" / "entries.py"
needs_writer = pytest.mark.skipif(not WRITES, reason="entries.py runs from its source here")

_SIZES = (0, 1, 255, 256, 65535, 65536)
_SEQS = (0, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**64 - 1)
_TIMES = (0.0, -0.0, -1.5, 1_764_000_000.123456, math.inf, -math.inf, math.nan)


def _packed(entries: list[Any]) -> bytes:
    packed: bytes = msgpack.Packer().pack(entries)
    return packed


def test_the_writer_runs_wherever_the_module_is_built_from_its_source() -> None:
    # (CI requires the build: there every case below runs the writer)
    built = _compiled.built_from(SOURCE) is True and not _compiled.pure_python()
    assert WRITES is built
    assert _compiled.loaded()[wire_entries.__name__] is built


@needs_writer
def test_every_encoding_boundary_is_written_as_packing_writes_it() -> None:
    entries = [
        [b"p" * size, fmt, None, seq, ts]
        for size in _SIZES
        for seq in _SEQS
        for ts in _TIMES
        for fmt in (0, 1)
    ]
    assert written(entries) == _packed(entries)


@needs_writer
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 65535, 65536, 70000])
def test_every_array_header_is_written_as_packing_writes_it(n: int) -> None:
    entries = [[b"x", i % 2, None, i, 1.5] for i in range(n)]
    assert written(entries) == _packed(entries)


_PLAIN = st.lists(
    st.tuples(
        st.binary(max_size=300),
        st.sampled_from([0, 1]),
        st.none(),
        st.integers(0, 2**64 - 1),
        st.floats(allow_nan=True, allow_infinity=True),
    ).map(list),
    max_size=40,
)


@needs_writer
@settings(max_examples=300, deadline=None)
@given(entries=_PLAIN)
def test_plain_entries_are_written_as_packing_writes_them(entries: list[Any]) -> None:
    assert written(entries) == _packed(entries)  # (a NaN too: both write its bits)


@needs_writer
@pytest.mark.parametrize(
    "entry",
    [
        [b"a", 0, {"h": 1}, 1, 1.0],  # headers: packed
        [b"a", True, None, 1, 1.0],  # (a bool packs as true, not 1)
        [b"a", 2, None, 1, 1.0],
        [b"a", 0, None, 1, 1],  # an int time
        [b"a", 0, None, -1, 1.0],  # Packer writes a negative int: not this writer's
        [b"a", 0, None, 2**64, 1.0],  # Packer refuses it: it must say so itself
        [bytearray(b"a"), 0, None, 1, 1.0],
        [b"a", 0, None, True, 1.0],
        (b"a", 0, None, 1, 1.0),
        [b"a", 0, None, 1],
        None,
    ],
)
def test_an_entry_it_does_not_write_leaves_the_run_to_be_packed(entry: Any) -> None:
    assert written([[b"ok", 0, None, 1, 1.0], entry]) is None


def test_from_its_source_it_writes_nothing() -> None:
    source: dict[str, Any] = {"__file__": str(SOURCE), "__name__": "entries_from_source"}
    exec(compile(SOURCE.read_text(), str(SOURCE), "exec"), source)
    assert source["WRITES"] is False
    assert source["written"]([[b"ok", 0, None, 1, 1.0]]) is None
    assert source["numbered"](b"", [], 0, _TS) is None


_TS = b"\xcb" + struct.pack(">d", 1_764_000_000.25)
_FIELDS = st.lists(
    st.tuples(
        st.binary(max_size=300),
        st.sampled_from([0, 1]),
        st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=5))),
    ).map(list),
    min_size=1,
    max_size=40,
)


@needs_writer
@settings(max_examples=300, deadline=None)
# (seqs just below each width's boundary: a batch's numbers cross it)
@given(
    fields=_FIELDS,
    seq=st.sampled_from(_SEQS[:-1]).flatmap(lambda s: st.integers(max(0, s - 41), s)),
)
def test_a_publish_batch_is_numbered_as_packing_its_entries_writes_them(
    fields: list[Any], seq: int
) -> None:
    # a client's batch of one publish run, its entries' spans found by the head's walk
    frame = msgpack.packb([["T.a", fields]])
    at, spans = publish_run(frame)
    assert at > 0
    want = [[*f, seq + 1 + i, 1_764_000_000.25] for i, f in enumerate(fields)]
    assert numbered(frame, spans, seq, _TS) == _packed(want)


@needs_writer
def test_spans_outside_the_frame_or_a_bad_time_write_nothing() -> None:
    frame = msgpack.packb([["T.a", [[b"x", 0, None]]]])
    _at, spans = publish_run(frame)
    assert numbered(frame, spans, 5, _TS) is not None
    assert numbered(frame, [spans[0], len(frame) + 1], 5, _TS) is None
    assert numbered(frame, [spans[1], spans[0]], 5, _TS) is None
    assert numbered(frame, [-1, spans[1]], 5, _TS) is None
    assert numbered(frame, spans[:1], 5, _TS) is None
    assert numbered(frame, spans, 5, _TS[:-1]) is None
