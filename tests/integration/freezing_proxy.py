"""A TCP proxy for tests that can freeze: it stops forwarding both ways and closes
nothing, which is what a connection looks like to its near end when the far host lost
power or sits behind a partition (TCP says nothing for many minutes).

Each accepted connection gets its own connection to the upstream address and a thread
per direction (blocking sends: a direction whose reader stalls stalls alone). Once
frozen, bytes already read are dropped, nothing more is read, and a connection that
arrives is accepted and left silent.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading

__all__ = ["FreezingProxy"]

#: seconds: how often the threads look at the flags while they wait
_POLL = 0.05


class FreezingProxy:
    """Forwards ``127.0.0.1:port`` to ``upstream`` until :meth:`freeze`."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._frozen = threading.Event()
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(_POLL)
        self.port: int = self._listener.getsockname()[1]
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def freeze(self) -> None:
        """Stop forwarding, both ways, on every connection; close none of them."""
        self._frozen.set()

    def close(self) -> None:
        """Close everything (the test's end: peers see their connections close)."""
        self._stopped.set()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)  # (wakes a thread blocked in recv)
            s.close()
        for t in self._threads:
            t.join(2.0)
        self._listener.close()

    def _keep(self, *socks: socket.socket) -> bool:
        with self._lock:
            if self._stopped.is_set():
                return False
            self._socks.extend(socks)
            return True

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                near, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if self._frozen.is_set():
                if not self._keep(near):  # (held open, never answered)
                    near.close()
                continue
            far = socket.create_connection(self._upstream)
            if not self._keep(near, far):
                near.close()
                far.close()
                return
            for src, dst in ((near, far), (far, near)):
                t = threading.Thread(target=self._pump, args=(src, dst), daemon=True)
                self._threads.append(t)
                t.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while not self._stopped.is_set():
            if self._frozen.is_set():
                self._stopped.wait(_POLL)  # (silent: no read, no close)
                continue
            try:
                # (select, not a timeout on the socket: the other direction's blocking
                # sendall uses the same socket)
                if not select.select([src], [], [], _POLL)[0]:
                    continue
                data = src.recv(65536)
            except (OSError, ValueError):  # (closed by close())
                return
            if self._frozen.is_set() or self._stopped.is_set():
                continue  # (read after the freeze: lost, as on a dead line)
            try:
                if not data:  # a close before the freeze travels on
                    dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
            except OSError:
                return
