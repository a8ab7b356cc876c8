"""Broker: the embedding facade. Runs a node's I/O loop in its own thread.

    with Broker(port=7100, data_dir="./data") as broker:
        print(broker.endpoint, broker.status())

``start()`` returns once every socket is bound (or raises the bind error); ``stop()`` asks
the loop to finish, joins the thread with a bounded wait, closes the sockets and releases
the data directory. Other threads talk to the node only through its inproc command
channel (ZeroMQ sockets are not thread-safe).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from types import TracebackType
from typing import Any

import zmq

from .config import NodeConfig, default_data_dir
from .const import START_TIMEOUT, STOP_TIMEOUT
from .errors import ZBrokerError
from .features.advisories import Advisories
from .features.discovery import LanDiscovery
from .features.durables import Durables
from .features.forward import StoreAndForward
from .features.gaps import GapNotices
from .features.introspection import Introspection
from .features.monitor import Monitor
from .features.persistent import PersistentPublish
from .features.queues import QueueGroups
from .features.retention import Retention
from .features.staging import StagedWrites
from .features.state import StateFeature
from .identity import DataDirLock, Identity, open_identity
from .node import CALL, STOP, Feature, Node, command_client, format_endpoint
from .node.reload import reload_security

__all__ = ["Broker", "node_features"]

log = logging.getLogger("zbroker.broker")
#: seconds between a waiting call()'s looks at whether the node still runs
CALL_POLL = 0.1


def node_features(config: NodeConfig) -> list[Feature]:
    """The features a node runs, in the order the kernel calls them at each phase.

    The order matters where features answer the same question: admission asks retention
    first, then durables, then store-and-forward (a refusal names the first full one);
    after each commit, store-and-forward sends before the durable pump."""
    return [
        Introspection(),
        Retention(),
        PersistentPublish(),
        StagedWrites(),
        StoreAndForward(),
        Durables(config.redistribution_delay, config.max_moves),
        QueueGroups(),
        LanDiscovery(),
        GapNotices(),
        *([Monitor(config.monitor)] if config.monitor.on else []),  # off by default
        *([Advisories()] if config.advisories.enabled else []),
        StateFeature(),
    ]


class Broker:
    """A broker node embedded in this process.

    Pass a :class:`~zbroker.config.NodeConfig`, keyword options (the same field names), or
    both (keywords override the config). ``port=0`` picks free ports; with ``port=0`` and no
    ``data_dir`` the node uses a temporary data directory removed by ``stop()``.
    """

    def __init__(self, config: NodeConfig | None = None, **options: Any) -> None:
        base = config or NodeConfig()
        self.config = base.replace(**options) if options else base
        self._thread: threading.Thread | None = None
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._node: Node | None = None
        self._cmd: zmq.Socket[bytes] | None = None
        self._cmd_lock = threading.Lock()
        self._lock: DataDirLock | None = None
        self._identity: Identity | None = None
        self._tmpdir: str | None = None
        self._ready = threading.Event()
        self._start_error: BaseException | None = None
        #: what ended the node's loop when it was not asked to stop (its store could not
        #: write: a full disk; or a bug), else None; ``running`` is False then
        self.failure: BaseException | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> Broker:
        """Open the data directory, bind every socket, start serving; return self."""
        if self._thread is not None:
            raise ZBrokerError("broker already started")
        self._ready.clear()
        self._start_error = None
        self.failure = None
        cfg = self.config
        if cfg.data_dir is not None:
            data_dir = cfg.data_dir
        elif cfg.port == 0:
            self._tmpdir = tempfile.mkdtemp(prefix="zbroker-")
            data_dir = Path(self._tmpdir)
        else:
            data_dir = default_data_dir(cfg.port)
        try:
            self._identity, self._lock = open_identity(data_dir, cfg.broker_id)
        except BaseException:
            self._cleanup_tmp()
            raise
        self._ctx = zmq.Context()
        endpoint = f"inproc://zbroker-cmd-{uuid.uuid4().hex}"
        self._node = Node(cfg, self._identity, self._ctx, endpoint, self._features(cfg))
        self._thread = threading.Thread(
            target=self._run, name=f"zbroker-node-{self._identity.broker_id}", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT):
            self._start_error = ZBrokerError("node did not become ready in time")
        if self._start_error is not None:
            error = self._start_error
            self._teardown()
            raise error
        self._cmd = command_client(self._ctx, endpoint)
        return self

    def _features(self, config: NodeConfig) -> list[Feature]:
        """The features this broker's node runs (a subclass may add its own)."""
        return node_features(config)

    def _run(self) -> None:
        node = self._node
        assert node is not None
        try:
            node.bind()
        except BaseException as exc:
            self._start_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            node.run()
        except Exception as exc:  # not bad input: log it loudly, never hang the embedder
            self.failure = exc
            log.exception("node loop crashed")
        finally:
            node.close()

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop serving: loop finished, sockets closed, thread joined (bounded wait). With
        clients connected the node first drains (50 ms after their last publish, 1 s at
        most): they hear LEAVING and move, and what they sent meanwhile is taken."""
        if self._thread is None:
            return
        if self._cmd is not None:
            with self._cmd_lock:
                try:
                    self._cmd.send(STOP, zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.error("node thread did not stop within %.1f s", timeout)
        self._teardown()

    def _teardown(self) -> None:
        with self._cmd_lock:  # (a call() in another thread may be sending)
            if self._cmd is not None:
                self._cmd.close(linger=0)
                self._cmd = None
        if self._ctx is not None and (self._thread is None or not self._thread.is_alive()):
            self._ctx.term()
        self._ctx = None
        self._thread = None
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        self._cleanup_tmp()

    def _cleanup_tmp(self) -> None:
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None

    def __enter__(self) -> Broker:
        return self.start() if self._thread is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- information -------------------------------------------------------------------

    def _require_node(self) -> Node:
        if self._node is None or self._identity is None:
            raise ZBrokerError("broker not started")
        return self._node

    @property
    def broker_id(self) -> str:
        return self._require_node().broker_id

    @property
    def incarnation(self) -> int:
        return self._require_node().incarnation

    @property
    def endpoint(self) -> str:
        """The well-known address (``tcp://HOST:PORT``) clients and peers connect to."""
        node = self._require_node()
        host = self.config.host
        if host in ("0.0.0.0", "*"):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        return format_endpoint(host, node.ports["control"])

    @property
    def ports(self) -> dict[str, int]:
        return dict(self._require_node().ports)

    def call(self, fn: Callable[[Node], Any], timeout: float = STOP_TIMEOUT) -> Any:
        """Run ``fn(node)`` inside the node thread and return its result. Raises
        ZBrokerError if the broker is not running or stops before the call ran, and
        TimeoutError if it ran past ``timeout``."""
        node = self._require_node()
        fut = node.submit(fn)
        with self._cmd_lock:  # (stop() closes the socket under the same lock)
            if self._cmd is None or not self.running:
                raise ZBrokerError("broker not running")
            # never block holding the lock: a node closing its end of the pair between the
            # check and the send would park this send, and stop() behind it, for good. An
            # unsent wake-up loses nothing: the loop takes every submitted call when it
            # wakes (a full pipe has wake-ups enough), and a node that is gone is seen below
            try:
                self._cmd.send(CALL, zmq.NOBLOCK)
            except zmq.Again:
                pass
        deadline = time.monotonic() + timeout
        while True:
            try:
                return fut.result(min(CALL_POLL, max(0.0, deadline - time.monotonic())))
            except FutureTimeout:
                if not self.running:  # stopped before it ran: it never will
                    raise ZBrokerError("broker stopped before the call ran") from None
                if time.monotonic() >= deadline:
                    raise

    def reload_security(self, config: NodeConfig | None = None) -> dict[str, Any]:
        """Reload the allowlist and client permissions without a restart (``zbroker
        start`` does it on SIGHUP): from the files the node started with, or from
        ``config``'s ``allowlist`` and ``clients``. The new rules apply at once: see
        :mod:`zbroker.node.reload`. Raises ConfigError (rules unchanged) if they do not
        load. Returns what changed."""
        if config is not None:
            allowlist, clients = config.allowlist, config.clients
        else:
            allowlist, clients = self.config.allowlist, self.config.clients
        result: dict[str, Any] = self.call(
            lambda node: reload_security(node, allowlist, clients, same_sources=config is None)
        )
        if config is not None:
            self.config = self.config.replace(allowlist=allowlist, clients=clients)
        return result

    def status(self) -> dict[str, Any]:
        """id, incarnation, endpoints, uptime, counters, subscriptions (a fresh dict)."""
        result: dict[str, Any] = self.call(lambda node: node.status())
        return result
