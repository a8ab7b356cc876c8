"""Shared fixtures for zbroker's tests.

Everything here binds and connects on 127.0.0.1 only.

* :func:`free_port` finds a base port P with P, P+1 and P+2 free (a node needs all three;
  :mod:`tests.ports` owns it and its registry of handed-out ports).
* ``broker`` / ``broker_factory``: a :class:`zbroker.Broker` running in a thread of the test
  process, with its data directory under ``tmp_path``; stopped in the finalizer.
* ``client_factory``: :class:`zbroker.Client` objects closed in the finalizer.
* ``procs``: starts subprocesses (the ``zbroker`` console script or ``python -m zbroker``)
  and always stops them *by PID* in the finalizer (SIGTERM, bounded wait, SIGKILL), also
  when the test fails. Nothing is ever killed by name (:mod:`tests.processes`, whose names
  are importable from here too).
* :func:`wait_ready` polls a node with a :class:`zbroker.Client` until HELLO succeeds
  (:mod:`tests.helpers`, with :func:`wait_until`).

The helper functions are also available as fixtures of the same name (``free_port``,
``wait_ready``, ``wait_until``). A test module that wants them as functions imports them
from the modules that own them, never from this file: pytest imports this file as
``conftest``, and ``import tests.conftest`` would run a second copy of it
(``tests/test_layout.py`` checks that no file does).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import wait_ready as wait_ready
from tests.helpers import wait_until as wait_until
from tests.ports import HOST as HOST
from tests.ports import free_port as free_port
from tests.processes import ZBROKER_SCRIPT as ZBROKER_SCRIPT
from tests.processes import Proc as Proc
from tests.processes import Procs as Procs
from tests.processes import subprocess_env as subprocess_env
from zbroker import Broker, Client

# NETWORK SAFETY: `zbroker start` turns LAN discovery (mDNS) on by default. No test may run
# it in the machine's own network namespace: every process the suite starts (and every
# CliRunner call) inherits discovery off. The netns tests turn it on explicitly, inside the
# namespaces they create.
os.environ["ZBROKER_DISCOVERY"] = "false"

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
