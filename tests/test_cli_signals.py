"""The foreground commands' stop signals (cli.main.SignalStop).

``zbroker start`` once ignored SIGTERM for good: its handler called ``threading.Event.set``,
which takes the lock that the main thread's ``Event.wait`` may hold when Python runs the
handler, so the main thread waited on itself. A signal storm against the waiting loop finds
that window within seconds (an Event-based loop wedges or dies of recursion here); the
handler now only records the signal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# waits in short steps like `zbroker start`'s loop, counting the signals it was woken by
_CHILD = textwrap.dedent(
    """
    import signal, sys, time
    from cli.main import SignalStop

    stops = SignalStop(signal.SIGUSR1)
    print("ready", flush=True)
    woken = 0
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        if stops.wait(0.001):
            woken += 1
            stops.received.clear()
    print("survived", woken, flush=True)
    """
)


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, "3.0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()  # by its PID (Popen), also when the test failed
        proc.wait(10)


def test_a_signal_storm_never_wedges_the_waiting_loop(child: subprocess.Popen[str]) -> None:
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    sent = 0
    while child.poll() is None and sent < 2_000:
        os.kill(child.pid, signal.SIGUSR1)
        sent += 1
        time.sleep(0.001)
    out, err = child.communicate(timeout=20)
    assert child.returncode == 0, err
    words = out.split()
    assert words[0] == "survived", out
    assert 1 <= int(words[1]) <= sent  # woken by the signals, at most once per signal


def test_wait_returns_at_once_once_a_signal_came() -> None:
    old = signal.getsignal(signal.SIGUSR2)
    try:
        from cli.main import SignalStop

        stops = SignalStop(signal.SIGUSR2)
        assert stops.wait(0.05) is False  # nothing yet: the whole timeout
        os.kill(os.getpid(), signal.SIGUSR2)
        t0 = time.monotonic()
        assert stops.wait(30.0) is True
        assert time.monotonic() - t0 < 5.0
        assert stops.received == [signal.SIGUSR2]
    finally:
        signal.signal(signal.SIGUSR2, old)
