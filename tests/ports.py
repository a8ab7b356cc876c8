"""Base ports for the nodes tests start: one registry of handed-out ports per process.

This module (not ``conftest.py``) owns the registry because pytest imports ``conftest.py``
as a module of its own (``conftest``): a test module importing it as ``tests.conftest``
made a second copy with a second registry, and the two could hand out the same ports.
Test modules import :func:`free_port` from here; conftest re-exports it as a fixture.
Everything binds on 127.0.0.1 only.
"""

from __future__ import annotations

import random
import socket
import threading

HOST = "127.0.0.1"

# Base ports are drawn below Linux's default ephemeral range (32768-60999), so outgoing
# connections of this or other processes do not take them between the check and the bind.
_PORT_LO = 20_000
_PORT_HI = 32_000
_handed_out: set[int] = set()
_port_lock = threading.Lock()


def _port_is_free(port: int) -> bool:
    """True if a TCP socket can bind 127.0.0.1:port right now (no SO_REUSEADDR: strict)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A base port P such that P, P+1 and P+2 are all free on 127.0.0.1.

    Triples handed out earlier in this process are never handed out again, so two calls in
    one test give non-overlapping triples.
    """
    rng = random.Random()
    with _port_lock:
        for _ in range(500):
            base = rng.randrange(_PORT_LO, _PORT_HI - 3)
            triple = {base, base + 1, base + 2}
            if triple & _handed_out:
                continue
            if all(_port_is_free(p) for p in sorted(triple)):
                _handed_out.update(triple)
                return base
    raise RuntimeError("no free triple of consecutive ports found on 127.0.0.1")
