"""A TCP relay on 127.0.0.1 that can cut one link between two node processes.

Nothing else cuts a single link on the loopback without network namespaces: killing or
stopping a node cuts all of its links at once. A configured link whose ``uri`` names a
:class:`CutProxy` instead of its peer goes through it; :meth:`CutProxy.cut` closes every
connection it relays (both nodes see the connection end) and refuses new ones until
:meth:`CutProxy.mend`, so the two nodes declare the link dead while both stay up and
their other links keep working. Threads, not processes: the run that owns the proxies
stops them with :meth:`CutProxy.close`.
"""

from __future__ import annotations

import socket
import threading

__all__ = ["CutProxy"]

_CHUNK = 65536


class CutProxy:
    """Relays connections made to :attr:`port` to ``127.0.0.1:target_port``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    def cut(self) -> None:
        """End every relayed connection and refuse new ones until :meth:`mend`."""
        with self._lock:
            self._cut = True
            self.cuts += 1
            doomed, self._open = self._open, set()
        for s in doomed:
            _end(s)

    def mend(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.cut()
        _end(self._listener)

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                refuse = self._cut or self._closed
            if refuse:
                _end(down)
                continue
            try:
                up = socket.create_connection(("127.0.0.1", self.target_port), timeout=2.0)
            except OSError:
                _end(down)  # the peer is down (killed): the dialer tries again later
                continue
            up.settimeout(None)
            with self._lock:
                if self._cut or self._closed:
                    _end(down)
                    _end(up)
                    continue
                self._open.update((down, up))
            for src, dst in ((down, up), (up, down)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(_CHUNK):
                dst.sendall(data)
        except OSError:
            pass
        with self._lock:
            self._open.discard(src)
            self._open.discard(dst)
        _end(src)
        _end(dst)


def _end(s: socket.socket) -> None:
    """Shut down (which wakes a thread blocked in recv on it) and close."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
