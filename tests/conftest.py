"""Shared fixtures for zbroker's tests.

Everything here binds and connects on 127.0.0.1 only.

* :func:`free_port` finds a base port P with P, P+1 and P+2 free (a node needs all three).
* ``broker`` / ``broker_factory``: a :class:`zbroker.Broker` running in a thread of the test
  process, with its data directory under ``tmp_path``; stopped in the finalizer.
* ``client_factory``: :class:`zbroker.Client` objects closed in the finalizer.
* ``procs``: starts subprocesses (the ``zbroker`` console script or ``python -m zbroker``)
  and always stops them *by PID* in the finalizer (SIGTERM, bounded wait, SIGKILL), also
  when the test fails. Nothing is ever killed by name (:mod:`tests.processes`, whose names
  are importable from here too).
* :func:`wait_ready` polls a node with a :class:`zbroker.Client` until HELLO succeeds.

The helper functions are also available as fixtures of the same name (``free_port``,
``wait_ready``), so test modules need not import this file.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.processes import ZBROKER_SCRIPT as ZBROKER_SCRIPT
from tests.processes import Proc as Proc
from tests.processes import Procs as Procs
from tests.processes import subprocess_env as subprocess_env
from zbroker import Broker, BrokerUnreachable, Client

HOST = "127.0.0.1"

# NETWORK SAFETY: `zbroker start` turns LAN discovery (mDNS) on by default. No test may run
# it in the machine's own network namespace: every process the suite starts (and every
# CliRunner call) inherits discovery off. The netns tests turn it on explicitly, inside the
# namespaces they create.
os.environ["ZBROKER_DISCOVERY"] = "false"

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


def wait_ready(endpoint: str, timeout: float = 20.0, proc: Proc | None = None) -> dict[str, Any]:
    """Poll the node at ``endpoint`` until a HELLO succeeds; return the HELLO reply.

    Raises TimeoutError after ``timeout`` seconds (each attempt is bounded too), or
    RuntimeError at once if ``proc`` (the node's process) has exited.
    """
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while True:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(
                f"{proc.describe()} exited with {proc.returncode} before it was ready; "
                f"stderr: {proc.stderr_text()!r}"
            )
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no node answered HELLO at {endpoint} within {timeout:g} s") from (
                last
            )
        try:
            # A DEALER queues the HELLO until the connection is up, so one attempt
            # succeeds as soon as the node binds within the attempt's timeout.
            with Client(endpoint, timeout=max(0.2, min(left, 2.0))) as client:
                return dict(client.hello)
        except BrokerUnreachable as exc:
            last = exc


def wait_until(cond: Callable[[], bool], timeout: float = 15.0, interval: float = 0.01) -> bool:
    """Poll ``cond`` until it is true (returns True) or ``timeout`` passes (returns False)."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(name="free_port")
def _free_port_fixture() -> Callable[[], int]:
    """The :func:`free_port` helper."""
    return free_port


@pytest.fixture(name="wait_ready")
def _wait_ready_fixture() -> Callable[..., dict[str, Any]]:
    """The :func:`wait_ready` helper."""
    return wait_ready


@pytest.fixture(name="wait_until")
def _wait_until_fixture() -> Callable[..., bool]:
    """The :func:`wait_until` helper."""
    return wait_until


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start in-thread brokers (``port=0``, data dir under tmp_path unless given); every
    one is stopped at teardown (stop() is idempotent, so tests may stop them early)."""
    started: list[Broker] = []
    counter = itertools.count(1)

    def make(**options: Any) -> Broker:
        options.setdefault("host", HOST)
        options.setdefault("port", 0)
        options.setdefault("data_dir", tmp_path / f"node-{next(counter)}")
        broker = Broker(**options)
        started.append(broker)
        return broker.start()

    try:
        yield make
    finally:
        for broker in reversed(started):
            broker.stop()


@pytest.fixture
def broker(broker_factory: Callable[..., Broker]) -> Broker:
    """One in-thread broker on free ports, data directory under tmp_path."""
    return broker_factory()


@pytest.fixture
def client_factory() -> Iterator[Callable[..., Client]]:
    """Create clients (``Client(endpoint, **kw)``); every one is closed at teardown."""
    clients: list[Client] = []

    def make(endpoint: str, **options: Any) -> Client:
        options.setdefault("timeout", 10.0)
        client = Client(endpoint, **options)
        clients.append(client)
        return client

    try:
        yield make
    finally:
        for client in reversed(clients):
            client.close()


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Procs]:
    """Start subprocesses; all are stopped by PID at teardown, also when the test fails."""
    manager = Procs(tmp_path)
    try:
        yield manager
    finally:
        manager.stop_all()
