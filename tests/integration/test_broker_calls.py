"""Broker.call against stop(): a call caught in the window where the node has closed its end
of the command pair but its thread still looks alive must neither block for good nor hold
the lock stop() needs. (The race test in test_node_lifecycle.py meets this window by
chance; a CI run hung on it in stop() for its whole time.)"""

from __future__ import annotations

import threading
from functools import partial
from pathlib import Path

import pytest
import zmq

from zbroker import Broker, ZBrokerError
from zbroker.node import CALL, STOP

HOST = "127.0.0.1"


class _Window(Broker):
    """A broker that reports its thread alive ``window`` more times than it is."""

    window = 0

    @property
    def running(self) -> bool:
        if self.window > 0:
            self.window -= 1
            return True
        return super().running


def _in_thread(fn: object, seconds: float) -> list[object]:
    """Run ``fn`` in a daemon thread; what it returned or raised, or [] if still running."""
    out: list[object] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    return out


def _constant(value: int, node: object) -> int:
    """A call whose answer is ``value``, whatever the node."""
    return value


def test_a_call_racing_the_end_of_the_loop_raises_and_stop_still_returns(
    tmp_path: Path,
) -> None:
    b = _Window(host=HOST, port=0, data_dir=tmp_path / "n")
    b.start()
    thread = b._thread
    assert thread is not None and b._cmd is not None
    try:
        b._cmd.send(STOP)  # the loop ends and closes its end of the pair
        thread.join(10)
        assert not thread.is_alive()
        b.window = 1  # ... but the call's check still sees it running
        outcome = _in_thread(lambda: b.call(lambda node: node.broker_id, timeout=5.0), 8.0)
        assert outcome, "call() blocked on a node that had closed its command socket"
        assert isinstance(outcome[0], ZBrokerError), outcome
        assert "stopped" in str(outcome[0])
    finally:
        stopped = _in_thread(b.stop, 10.0)
    assert stopped == [None], "stop() waited on a lock a blocked call held"
    assert not b.running


def test_calls_from_many_threads_each_get_their_answer(tmp_path: Path) -> None:
    # every queued call runs, however the wake-ups are spread over them
    with Broker(host=HOST, port=0, data_dir=tmp_path / "n") as b:
        results: list[int] = []
        lock = threading.Lock()

        def ask(i: int) -> None:
            for j in range(50):
                value: int = b.call(partial(_constant, i * 100 + j), timeout=20.0)
                with lock:
                    results.append(value)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(results) == sorted(i * 100 + j for i in range(8) for j in range(50))


def test_a_call_after_stop_says_the_broker_is_not_running(tmp_path: Path) -> None:
    b = Broker(host=HOST, port=0, data_dir=tmp_path / "n").start()
    b.stop()
    with pytest.raises(ZBrokerError):
        b.call(lambda node: 1)


def test_calls_whose_wake_ups_found_the_pipe_full_still_run(tmp_path: Path) -> None:
    # the loop is held while more calls queue than the inproc pipe holds wake-ups (its two
    # high-water marks, 1,000 each): their wake-ups are dropped, never waited on, and the
    # loop still runs every queued call once it wakes
    with Broker(host=HOST, port=0, data_dir=tmp_path / "n") as b:
        held, release = threading.Event(), threading.Event()

        def hold(node: object) -> None:
            held.set()
            release.wait(30)

        hold_thread = threading.Thread(target=b.call, args=(hold,), kwargs={"timeout": 40.0})
        hold_thread.start()
        assert held.wait(10)
        node, cmd = b._node, b._cmd
        assert node is not None and cmd is not None
        futures = []
        dropped = 0
        for i in range(3_000):  # what Broker.call does, without waiting for each answer
            futures.append(node.submit(partial(_constant, i)))
            with b._cmd_lock:  # (the socket is Broker.call's: used under its lock)
                try:
                    cmd.send(CALL, zmq.NOBLOCK)
                except zmq.Again:
                    dropped += 1
        release.set()
        hold_thread.join(40)
        assert dropped > 0  # (else this test shows nothing)
        assert [f.result(20) for f in futures] == list(range(3_000))
