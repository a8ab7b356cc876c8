"""The channel from user threads to the client thread: a command queue and a wake-up.

ZeroMQ sockets are not thread-safe, so user threads never touch the client thread's
sockets: they queue a command (``name, arg, future``) and send one byte on an inproc PAIR
to wake the thread, which drains the queue. The bytes only wake; the queue says what to do,
so a wake-up that could not be sent costs at most one tick of delay.
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import zmq

from ..errors import ClientClosed

__all__ = ["Channel", "Command"]

#: (name, argument, future or None): "stop", "sub", "unsub", "send", "req" or "persistent"
Command = tuple[str, Any, "Future[Any] | None"]


class Channel:
    """Both ends: :meth:`bind` and :meth:`commands` are the client thread's, the rest
    belong to user threads (under one lock, since their PAIR socket is shared)."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self._ctx = ctx
        self._queue: queue.SimpleQueue[Command] = queue.SimpleQueue()
        self._endpoint = f"inproc://zbroker-client-{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._sock: zmq.Socket[bytes] | None = None  # user end, once the thread has bound
        self._bound: zmq.Socket[bytes] | None = None
        self._shut = False  # the client thread has stopped taking commands

    # -- the client thread's end ---------------------------------------------------------

    def bind(self) -> zmq.Socket[bytes]:
        """Bind the thread's end (from the client thread, before anything is posted)."""
        sock = self._bound = self._ctx.socket(zmq.PAIR)
        sock.setsockopt(zmq.RCVHWM, 0)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self._endpoint)
        return sock

    def pending(self) -> bool:
        """Commands wait (whose wake-up byte could not be sent)."""
        return not self._queue.empty()

    def shut(self) -> list[Command]:
        """The client thread stops: no command is taken any more (``post`` raises
        ClientClosed); returns those it never took, whose callers it must answer."""
        with self._lock:
            self._shut = True
        return list(self.commands())

    def commands(self) -> Iterator[Command]:
        """Swallow the wake-up bytes, then yield every queued command."""
        assert self._bound is not None
        while True:
            try:
                self._bound.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        while True:
            try:
                yield self._queue.get_nowait()
            except queue.Empty:
                return

    # -- user threads' end ---------------------------------------------------------------

    def connect(self) -> None:
        """Connect the user end (once the client thread has bound its end)."""
        sock = self._ctx.socket(zmq.PAIR)
        sock.setsockopt(zmq.LINGER, 0)
        # wake-up bytes are tiny and must never be refused: no high-water mark
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.connect(self._endpoint)
        self._sock = sock

    def post(self, command: Command) -> None:
        with self._lock:
            if self._shut:  # (nobody would ever answer it)
                raise ClientClosed("the client is closed (its thread has stopped)")
            self._queue.put(command)
            self._send_wake()

    def wake(self) -> None:
        with self._lock:
            self._send_wake()

    def _send_wake(self) -> None:
        if self._sock is None:
            return
        try:
            self._sock.send(b"x", zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the thread is behind or gone: it drains the queue on its next tick

    def stop(self) -> None:
        """Ask the client thread to stop, also when the user end was never connected (a
        constructor that gave up waiting): then wake it through a socket of its own."""
        try:
            self.post(("stop", None, None))
        except ClientClosed:
            return  # stopped already
        if self._sock is not None:
            return
        try:
            poke = self._ctx.socket(zmq.PAIR)
            poke.setsockopt(zmq.LINGER, 0)
            poke.connect(self._endpoint)
            poke.send(b"x")
            poke.close()
        except zmq.ZMQError:
            pass

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
