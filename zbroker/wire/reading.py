"""Reading a frame off a socket: copied while frames are small, a view of the message
libzmq received once they are large.

pyzmq's ``recv()`` copies every frame into a new ``bytes``; ``recv(copy=False)`` keeps
the message libzmq received and lends its buffer, at the price of a ``Frame`` object. On
this machine (``benchmarks/bench_recv.py``, median reads, 2026-11-30 02:28 UTC) a 150 B
frame took 0.7 µs copied and 2.3 as a view; a 256 KiB frame 16.6 µs copied and 2.2 as a
view. A link frame of a flood of 1 KiB messages is about 256 KiB (``LINK_BATCH_BYTES``),
a delivery frame as large; at a low rate a frame is one message. So a reader looks at the
size of the frame it read last: after a large one it reads the next without a copy (and
still copies it if it is small), after a small one it copies. The view keeps the message alive
as long as anything holds it (a run's entries kept for splicing, :mod:`.splice`), as the
copied ``bytes`` did.
"""

from __future__ import annotations

from typing import Any

import zmq

__all__ = ["VIEW_BYTES", "FrameReader"]

#: frames of at least this many bytes are read as views (a view costs about 2 µs
#: whatever the size; a copy 1.1 at 4 KiB, 2.5 at 16 KiB, 4.3 at 32 KiB, 7.6 at 64 KiB)
VIEW_BYTES = 32 * 1024


class FrameReader:
    """``reader(flags)`` reads the next frame of one socket as its ``recv(flags)`` would
    (raises ``zmq.Again`` if none waits with NOBLOCK): as a view of libzmq's message if
    the last frame it read was large and this one is large too, else as bytes."""

    __slots__ = ("_recv", "large")

    def __init__(self, sock: zmq.Socket[Any]) -> None:
        self._recv = sock.recv
        #: the last frame read was large (a flood): the next is read as a view
        self.large = False

    def __call__(self, flags: int = 0) -> bytes | memoryview:
        body: bytes | memoryview
        if self.large:
            msg = self._recv(flags, copy=False)
            body = msg.buffer if len(msg) >= VIEW_BYTES else msg.bytes
        else:
            body = self._recv(flags)
        self.large = len(body) >= VIEW_BYTES
        return body
