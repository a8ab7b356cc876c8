"""``benchmarks/crelay.c``, the C relays beside the peers in ``bench_peers.py``: built with
the machine's C compiler against pyzmq's libzmq, a line of them passes every frame on
once, in order, unchanged, and each stops by its PID. Checked here so a relay that no
longer builds or forwards says so in the suite, not in the middle of a sitting."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import zmq

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def peer_relays(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # (its imports are top-level)
    import peer_relays as module

    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine")
    if module._libzmq() is None:
        pytest.skip("pyzmq has no bundled libzmq to link against (built from source)")
    return module


def test_a_line_of_c_relays_passes_every_frame_once_in_order(peer_relays: Any) -> None:
    topo = peer_relays.start_c(None, 3, "")
    ctx = zmq.Context()
    push, sub = ctx.socket(zmq.PUSH), ctx.socket(zmq.SUB)
    try:
        push.connect(f"tcp://127.0.0.1:{topo['pub_at']}")
        sub.connect(f"tcp://127.0.0.1:{topo['sub_at']}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        deadline = time.monotonic() + 10
        while not sub.poll(50):  # (each SUB joins late: probe until the line is up)
            assert time.monotonic() < deadline, "no probe crossed the C relays in 10 s"
            push.send(b"PROBE")
        while sub.poll(200):
            assert sub.recv() == b"PROBE"
        frames = [b"BENCH.DATA %d " % i + bytes(range(256)) for i in range(50)]
        for frame in frames:
            push.send(frame)
        got: list[bytes] = []
        while len(got) < len(frames) and sub.poll(5000):
            got.append(sub.recv())
        assert got == frames
        assert not sub.poll(200)  # nothing twice
    finally:
        push.close(0)
        sub.close(0)
        ctx.term()
        from chain_run import stop_processes

        stop_processes(topo["procs"])  # by PID (SIGKILL after 10 s)
    assert all(p.returncode is not None for p in topo["procs"])
