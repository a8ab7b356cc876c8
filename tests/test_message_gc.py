"""A delivered Message costs the cyclic garbage collector nothing where it is compiled.

Compiled, :class:`~zbroker.client.messages.Message` is an extension type the collector
does not track (``messages.pxd``, ``cython.no_gc``), and a message that came without
headers gets its empty ``headers`` dict only when something reads it. Before, each
delivery made two tracked objects (the Message and an empty dict), so a flooded
subscriber ran a collection every few hundred messages. Asserted here: what the headers
look like to a reader (each message its own dict, settable), which build tracks Messages,
that building the Messages of a 512-entry delivery frame allocates no tracked object per
message where compiled, and that the module runs from its source without Cython.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import msgpack

from zbroker import _compiled, wire
from zbroker.client import messages
from zbroker.client.messages import Message, messages_from_runs
from zbroker.client.state import InitialMessage, value_message

SOURCE = Path(messages.__file__).with_name("messages.py")
COMPILED = _compiled.built_from(SOURCE) is True and not _compiled.pure_python()


def message(headers: dict[str, object] | None) -> Message:
    return Message("T.x", b"p", "bytes", headers, "A", 1, 7, 1.5, "T.>", b"p")


def test_a_message_without_headers_reads_an_empty_dict_of_its_own() -> None:
    a, b = message(None), message(None)
    assert a.headers == {} and b.headers == {}
    a.headers["k"] = 1  # each message's own dict, as before: not one shared
    assert a.headers == {"k": 1} and b.headers == {}
    b.headers = {"zb.version": 3}
    assert b.headers == {"zb.version": 3} and b.version == 3 and not b.removed
    assert message(None).version is None and message({}).removed is False
    assert message(None) == message({})  # no headers and empty headers read the same
    assert message({"h": 1}) != message(None)
    assert "headers={}" in repr(message(None))


def test_the_compiled_message_is_not_tracked_by_the_collector() -> None:
    assert _compiled.loaded()[messages.__name__] is COMPILED
    assert gc.is_tracked(message(None)) is not COMPILED
    assert gc.is_tracked(message({"h": [1]})) is not COMPILED


def test_a_delivery_frame_of_512_messages_makes_no_tracked_object_per_message() -> None:
    entries = [[b"M" * 100, wire.FMT_BYTES, None, i, 1.5] for i in range(1, 513)]
    frame = b"T.>\0" + msgpack.packb([["T.x", "A", 1, entries]]) + (512).to_bytes(8, "big")
    pattern, first, items, runs = wire.decode_delivery_items(frame)
    assert runs and first == 1
    was = gc.isenabled()
    gc.disable()  # (no collection may reset the count in between)
    try:
        before = gc.get_count()[0]
        msgs = messages_from_runs(pattern, items)
        made = gc.get_count()[0] - before
    finally:
        if was:
            gc.enable()
    assert len(msgs) == 512 and [m.seq for m in msgs] == list(range(1, 513))
    assert all(m.headers == {} for m in msgs)
    if COMPILED:
        assert made <= 2  # the list of messages; nothing per message
    else:
        assert made >= 512  # from the sources each Message is a tracked object


def test_an_initial_message_is_made_anew_with_its_version() -> None:
    m = value_message("S.>", ["S.a", b"v", wire.FMT_BYTES, {"h": 1}, 4, "B", 2.5, None])
    assert type(m) is InitialMessage and m.initial
    assert m.headers == {"h": 1, "zb.version": 4, "zb.owner": "B"}
    assert m.version == 4 and m.payload == b"v" and m.timestamp == 2.5
    other = value_message("S.>", ["S.a", b"w", wire.FMT_BYTES, {"h": 1}, 4, "B", 2.5, None])
    # (equality compares every field: it once read InitialMessage's empty __slots__)
    assert m != other and m == value_message("S.>", ["S.a", b"v", 0, {"h": 1}, 4, "B", 2.5, None])


def test_messages_run_from_their_source_without_cython() -> None:
    code = (
        "import sys; sys.modules['cython'] = None\n"  # (an import of it raises ImportError)
        "from zbroker.client import messages as m\n"
        "msg = m.Message('T.x', b'p', 'bytes', None, 'A', 1, 2, 1.5, 'T.>', b'p')\n"
        "print(m.__file__.endswith('.py'), m.cython.__name__, msg.headers, msg.id)\n"
    )
    env = {**os.environ, _compiled.ENV: "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "zbroker._cython", "{}", "A:1:2"]
