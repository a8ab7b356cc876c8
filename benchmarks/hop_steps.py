"""Node B's own steps on a link frame, in loops of their own: ``bare_hop.py``'s ``work``
and ``head`` variants (run in B's thread once it has taken over; they reach into the
relay's internals, which ``tests/test_bare_hop.py`` runs them against).

Both are :func:`bare_hop.python_hop`'s loop, written out again (a generator shared by
them would add its own cost per frame to the bounds measured), with B's work on each
frame from A; C's frames go to A as they came, and so do A's frames that hold no messages
(its heartbeats keep C's link up):

* ``work`` (:class:`Steps`): the steps as the pipeline and the link flush take them: the
  frame decoded and checked, deduped, routed (the relay's plan, kept across frames: a run
  has no interest changes), encoded again and sent;
* ``head``: a frame of one run whose head (all before the entries' array) came before is
  read by ``zb_run_head`` (``bare_hop.c``: the frame's shape, the head's types and every
  entry checked to the frame's end, the seqs consecutive), deduped by its first and last
  seq, and sent as the head B wrote for it (its path with B added) followed by the
  entries' bytes as they came. A head seen first, a frame of another shape, seqs that do
  not follow their origin's floor, or a route that is not to one link: :class:`Steps`.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import zmq

#: after this many frames taken by their head, head_hop says so (on the node's stdout)
TAKEN_SAID = 100


class Steps:
    """B's steps on one link frame, as the pipeline and the flush do them."""

    def __init__(self, node: Any) -> None:
        from zbroker import wire
        from zbroker.links.flush import _encode_runs
        from zbroker.node import relay

        self.wire, self.encode_runs, self.relay = wire, _encode_runs, relay
        self.pipe, self.table, self.counters = node.pipeline, node.links, node.counters
        self.seen, self.state_of = self.pipe.dedupe.seen, self.pipe.dedupe.state
        self.caches = self.pipe._link_caches
        self.plans: dict[Any, Any] = {}

    def checked_runs(self, frame: bytes) -> list[Any] | None:
        """The frame's runs, checked (a bad one None); None for a frame of no messages."""
        value = self.wire.decode_frame(frame)
        if value[0] != self.wire.MSGR:
            return None
        errors: list[tuple[str, str]] = []
        self.wire.check_runs(value[1], self.caches, errors)
        return value[1]  # type: ignore[no-any-return]

    def plan(self, run: list[Any]) -> Any:
        topic, key_path, key_targets = run[0], run[3], run[4]
        plan = self.plans.get((topic, key_path, key_targets))
        if plan is None:
            plan = self.plans[topic, key_path, key_targets] = self.relay._plan(
                self.pipe, topic, key_path, key_targets, {}
            )
        return plan

    def take(self, runs: list[Any]) -> None:
        """Dedupe, route, encode and send each run (as the relay and the flush would)."""
        for run in runs:
            if run is None:
                continue
            topic, origin, inc, _, _, entries = run[:6]
            plan = self.plan(run)
            kept = self.relay._fresh(self.seen, self.state_of, origin, inc, entries)
            if plan[0] is False or not kept:
                continue
            body = [kept, run[6]] if kept is entries and len(run) == 7 else [kept]
            for out, targets, _copies in plan[2]:
                out_run = [topic, origin, inc, plan[0], targets, *body]
                if self.table.send(out, self.encode_runs([out_run]), time.monotonic()):
                    self.counters.forwarded += len(kept)

    def head(self, frame: bytes) -> tuple[Any, bytes, str, int] | None:
        """For a frame of one plain run: (the link, the head B writes, origin, inc)."""
        runs = self.checked_runs(frame)
        if not runs or len(runs) != 1 or runs[0] is None:
            return None
        topic, origin, inc = runs[0][:3]
        fwd, patterns, links, missing, selective, sinks = self.plan(runs[0])
        if fwd is False or patterns or missing or selective or sinks or len(links) != 1:
            return None
        out, targets, copies = links[0]
        if copies != 1:
            return None
        written = self.wire.encode_link(self.wire.MSGR, [[topic, origin, inc, fwd, targets, []]])
        return out, written[:-1], origin, inc  # (less the empty entries' array, 0x90)


def work_hop(node: Any, dealer: zmq.Socket[bytes], router: zmq.Socket[bytes], ident: bytes) -> None:
    """``work``: each link frame from A through :class:`Steps`."""
    steps = Steps(node)
    poller = zmq.Poller()
    poller.register(dealer, zmq.POLLIN)
    poller.register(router, zmq.POLLIN)
    nb, more = zmq.NOBLOCK, zmq.SNDMORE
    while True:
        for sock, _ in poller.poll():
            while True:
                try:
                    first = sock.recv(nb)
                except zmq.Again:
                    break
                if sock is router:
                    frame = router.recv()
                    if first == ident:
                        dealer.send(frame)
                    continue
                runs = steps.checked_runs(first)
                if runs is None:
                    router.send(ident, more)
                    router.send(first)
                else:
                    steps.take(runs)


def run_head_function(lib_path: str) -> Any:
    """``zb_run_head`` of the library built from ``bare_hop.c``."""
    fn = ctypes.CDLL(lib_path).zb_run_head
    ptr = ctypes.POINTER(ctypes.c_longlong)
    fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ptr, ptr]
    fn.restype = ctypes.c_long
    return fn


def head_hop(
    node: Any, dealer: zmq.Socket[bytes], router: zmq.Socket[bytes], ident: bytes, lib: str
) -> None:
    """``head``: a known head's frame deduped by its seq range and sent on as its bytes."""
    steps = Steps(node)
    run_head = run_head_function(lib)
    a, z = ctypes.c_longlong(), ctypes.c_longlong()
    pa, pz = ctypes.byref(a), ctypes.byref(z)
    heads: dict[bytes, Any] = {}
    state_of, send, counters = steps.state_of, node.links.send, node.counters
    taken = 0
    poller = zmq.Poller()
    poller.register(dealer, zmq.POLLIN)
    poller.register(router, zmq.POLLIN)
    nb, more = zmq.NOBLOCK, zmq.SNDMORE
    while True:
        for sock, _ in poller.poll():
            while True:
                try:
                    first = sock.recv(nb)
                except zmq.Again:
                    break
                if sock is router:
                    frame = router.recv()
                    if first == ident:
                        dealer.send(frame)
                    continue
                at = run_head(first, len(first), pa, pz)
                head = first[:at] if at > 0 else b""
                known: Any = heads.get(head) if head else False
                if known is None:  # (a head's first frame: learnt, and takes the steps)
                    heads[head] = steps.head(first) or False
                elif known:
                    out, written, origin, inc = known
                    s = state_of(origin, inc)
                    if s is not None and a.value - 1 == s.floor and not s.above:
                        s.floor = z.value
                        if send(out, written + first[at:], time.monotonic()):
                            counters.forwarded += z.value - a.value + 1
                        taken += 1
                        if taken == TAKEN_SAID:  # (the suite's round asserts the line)
                            print(f"head: {taken} frames taken by their head", flush=True)
                        continue
                runs = steps.checked_runs(first)
                if runs is None:
                    router.send(ident, more)
                    router.send(first)
                else:
                    steps.take(runs)
