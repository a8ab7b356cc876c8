"""``benchmarks/bare_hop.py`` turns node B of a chain into a bare hop in a patched copy of
the sources: its kernel anchors must still be there once each and the patched kernel must
compile, and both hops (pyzmq, and C on libzmq) must move every frame between a DEALER
and a ROUTER identity once, in order, and drop another identity's. Checked here so a
change that moves an anchor, or a hop that no longer builds or moves, says so in the
suite, not in the middle of a sitting."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def bare_hop(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(REPO / "benchmarks"))  # (its imports are top-level)
    import bare_hop as module

    return module


def test_the_kernel_patch_applies_once_and_compiles(bare_hop: Any) -> None:
    source = (REPO / "zbroker" / "node" / "kernel.py").read_text()
    patched = bare_hop.patch_kernel(source)
    compile(patched, "kernel.py", "exec")
    compile(bare_hop.SWITCH_MODULE, "_bare_hop.py", "exec")
    for anchor, added in bare_hop.PATCHES:
        assert patched.count(anchor + added) == 1
    with pytest.raises(RuntimeError, match="no longer has this once"):
        bare_hop.patch_kernel(source.replace("import zmq\n", "import zmq as _zmq\n"))


@pytest.fixture
def sockets() -> Iterator[dict[str, zmq.Socket[bytes]]]:
    """A's ROUTER; B's DEALER dialing it and B's ROUTER; C's and X's DEALERs dialing B."""
    ctx = zmq.Context()
    s: dict[str, zmq.Socket[bytes]] = {}
    try:
        s["a"] = ctx.socket(zmq.ROUTER)
        port_a = s["a"].bind_to_random_port("tcp://127.0.0.1")
        s["b_dealer"] = ctx.socket(zmq.DEALER)
        s["b_dealer"].setsockopt(zmq.IDENTITY, b"B")
        s["b_dealer"].connect(f"tcp://127.0.0.1:{port_a}")
        s["b_router"] = ctx.socket(zmq.ROUTER)
        port_b = s["b_router"].bind_to_random_port("tcp://127.0.0.1")
        for name in ("C", "X"):
            s[name] = ctx.socket(zmq.DEALER)
            s[name].setsockopt(zmq.IDENTITY, name.encode())
            s[name].connect(f"tcp://127.0.0.1:{port_b}")
        yield s
    finally:
        for sock in s.values():
            sock.close(0)
        ctx.term()


def _moves_every_frame(s: dict[str, zmq.Socket[bytes]], hop: Callable[..., int]) -> None:
    up = [b"up %d" % i + bytes(range(200)) for i in range(20)]
    down = [b"down %d" % i for i in range(20)]
    done: list[int] = []
    t = threading.Thread(
        target=lambda: done.append(hop(s["b_dealer"], s["b_router"], b"C", 40)), daemon=True
    )
    t.start()
    s["X"].send(b"not C's: dropped")
    for frame in up:
        s["C"].send(frame)
    got_up = [s["a"].recv_multipart() for _ in up if s["a"].poll(5000)]
    assert got_up == [[b"B", frame] for frame in up]
    for frame in down:
        s["a"].send_multipart([b"B", frame])
    got_down = [s["C"].recv() for _ in down if s["C"].poll(5000)]
    assert got_down == down
    t.join(5)
    assert done == [40]  # returned after its limit: 40 moved, X's frame not among them
    assert not s["a"].poll(100) and not s["C"].poll(100) and not s["X"].poll(100)


def test_the_python_hop_moves_every_frame_once_in_order(
    bare_hop: Any, sockets: dict[str, zmq.Socket[bytes]]
) -> None:
    _moves_every_frame(sockets, bare_hop.python_hop)


def test_the_c_hop_moves_every_frame_once_in_order(
    bare_hop: Any, sockets: dict[str, zmq.Socket[bytes]], tmp_path: Path
) -> None:
    import peer_relays

    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine")
    if peer_relays._libzmq() is None:
        pytest.skip("pyzmq has no bundled libzmq to link against (built from source)")
    lib = str(bare_hop.build_c(tmp_path))
    _moves_every_frame(sockets, lambda *a: bare_hop.c_hop(lib, *a))


def test_the_summary_compares_with_node_only_when_node_ran(
    bare_hop: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(p50_ms: float) -> dict[str, Any]:
        return {"latency": {"p50_ms": p50_ms, "p99_ms": 2 * p50_ms}}

    bare_hop.summary({"node": [run(0.5), run(0.52)], "python": [run(0.4)]})
    out = capsys.readouterr().out
    assert "node    p50   510 (500-520), p99  1020 (1000-1040), p50 +0 against node" in out
    assert "python  p50   400 (400-400), p99   800 (800-800), p50 -110 against node" in out
    bare_hop.summary({"python": [run(0.4)], "c": [run(0.42)]})
    assert "against" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_of_node_work_and_head_loses_nothing() -> None:
    """The whole script, one short round: the copy patched and built, B turned into
    ``work`` and ``head`` mid-run (their loops reach into the relay's internals: a rename
    there must say so here), every message delivered in each run."""
    cmd = [sys.executable, str(REPO / "benchmarks" / "bare_hop.py")]
    cmd += ["--rounds", "1", "--seconds", "1", "--variants", "node,work,head"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:  # (by its PID: SIGTERM lets it stop its own children)
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(5)
    assert proc.returncode == 0, out[-2000:]
    rounds = [ln for ln in out.splitlines() if ln.startswith("round 1 ")]
    assert [ln.split()[2] for ln in rounds] == ["node", "work", "head"], out[-2000:]
    assert all(", lost 0, " in ln for ln in rounds), rounds
    assert "head: 100 frames taken by their head" in out  # (its fast path, not only work's)


@pytest.fixture
def run_head(bare_hop: Any, tmp_path: Path) -> Callable[[bytes], tuple[int, int, int]]:
    """``zb_run_head`` (``bare_hop.c``): (where the entries start, first seq, last seq)."""
    import hop_steps
    import peer_relays

    if shutil.which("gcc") is None and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine")
    if peer_relays._libzmq() is None:
        pytest.skip("pyzmq has no bundled libzmq to link against (built from source)")
    fn = hop_steps.run_head_function(str(bare_hop.build_c(tmp_path)))
    first, last = ctypes.c_longlong(-7), ctypes.c_longlong(-7)

    def call(frame: bytes) -> tuple[int, int, int]:
        return (
            fn(frame, len(frame), ctypes.byref(first), ctypes.byref(last)),
            first.value,
            last.value,
        )

    return call


def _entry(seq: int, headers: Any = None) -> list[Any]:
    return [b"x" * 100, 0, headers, seq, 1.5]


def test_a_one_run_frames_head_is_read_in_c_and_its_bytes_go_on(run_head: Any) -> None:
    from zbroker import wire

    frame = wire.encode_link(wire.MSGR, [["PRICE.x", "A", 7, ["A"], None, [_entry(5)]]])
    at, first, last = run_head(frame)
    assert (first, last) == (5, 5)
    assert frame[:at] == wire.encode_link(wire.MSGR, [["PRICE.x", "A", 7, ["A"], None, []]])[:-1]
    written = wire.encode_link(wire.MSGR, [["PRICE.x", "A", 7, ["A", "B"], None, []]])[:-1]
    assert wire.decode_frame(written + frame[at:]) == [
        wire.MSGR,
        [["PRICE.x", "A", 7, ["A", "B"], None, [_entry(5)]]],
    ]
    nested = {"k": [1, {"a": b"z"}], "n": None}
    many = [_entry(9, nested), _entry(10), _entry(11)]
    big = wire.encode_link(wire.MSGR, [["T", "o", 2**40, ["A", "C"], ["x", "y"], many]])
    assert run_head(big)[1:] == (9, 11)


@pytest.mark.parametrize(
    "runs, tail",
    [
        ([["T", "o", 1, [], None, [_entry(9), _entry(11)]]], b""),  # a gap in the seqs
        ([["T", "o", 1, [], None, [_entry(9)]], ["T", "o", 1, [], None, [_entry(10)]]], b""),
        ([["T", "o", 1, [], None, [_entry(9)]]], b"\x00"),  # something after the frame
        ([["T", "o", 1, [], None, []]], b""),  # no entries
        ([["T", "o", 1, [], None, [[b"x", 2, None, 9, 1.5]]]], b""),  # fmt 2
        ([["T", "o", 1, [], None, [["text", 0, None, 9, 1.5]]]], b""),  # payload not bin
        ([["T", "o", 1, [], None, [[b"x", 0, None, -1, 1.5]]]], b""),  # negative seq
        ([["T", "o", -1, [], None, [_entry(9)]]], b""),  # negative incarnation
        ([["T", "o", 1, [1], None, [_entry(9)]]], b""),  # a path of numbers
    ],
)
def test_any_other_frame_is_left_to_the_general_way(
    run_head: Any, runs: list[Any], tail: bytes
) -> None:
    from zbroker import wire

    frame = wire.encode_link(wire.MSGR, runs)
    assert run_head(frame + tail)[0] == -1
    assert run_head(frame[:-1])[0] == -1  # cut short
    assert run_head(b"")[0] == -1
