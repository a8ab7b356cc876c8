"""The store-and-forward rules of zbroker.forward, sans-IO, over a real Store.

Two Forwarders (sender, receiver) with their own stores; frames are carried by hand:

* entries are taken exactly once per link, strictly in link-sequence order (resends and
  out-of-order entries are not taken), and the position survives a restart of the
  receiver (a new Forwarder over the same store);
* acknowledged entries are deleted, unacknowledged ones are resent on attach and after
  the retransmit timeout, and survive a restart of the sender;
* a new epoch (a wiped sender store) starts the numbering again;
* the bounds drop the oldest entries, counted, and ``base`` lets the receiver skip them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack

from zbroker import wire
from zbroker.features.forward import RETRANSMIT_AFTER, Forwarder
from zbroker.features.forward.dedupe import RoutedTargets
from zbroker.store import Store


def fields(i: int) -> list[Any]:
    return ["T.x", str(i).encode(), 0, None, "A", 1, i, 1.0, ["A"], None, i]


class Drops(dict[str, int]):
    """Stands in for the node's drop counters (``Context.drop``)."""

    def __call__(self, reason: str, n: int) -> None:
        self[reason] = self.get(reason, 0) + n


def make(path: Path, **kw: Any) -> tuple[Store, Forwarder]:
    store = Store(path)
    return store, Forwarder(store, **kw)


def carry(sender: Forwarder, receiver: Forwarder, ikey: str = "A/l") -> list[int]:
    """Send every ready frame of the sender's queues; return the payloads the receiver
    took, in order."""
    took = []
    for q in list(sender.ready()):
        while q.sent_upto < q.entries[-1][0]:
            frame, upto, n = sender.next_frame(q, 7)
            value = wire.decode_frame(frame)
            epoch, base, entries = wire.decode_pmsgs(value)
            for m in entries:
                wire.check_pmsgs_entry(m)
                if receiver.accept(ikey, epoch, base, m[0]):
                    took.append(int(m[2]))
            sender.sent(q, upto, n)
    return took


def ack(sender: Forwarder, receiver: Forwarder, sender_store: Store, rstore: Store) -> int:
    rstore.commit()  # the receiver acknowledges only what it committed
    pos = receiver.position("A/l")
    assert pos is not None
    n = sender.on_ack("l", pos[0], pos[1], 0.0)
    sender_store.commit()
    return n


def test_exactly_once_in_order_across_resends_and_restarts(tmp_path: Path) -> None:
    sstore, s = make(tmp_path / "s.db")
    rstore, r = make(tmp_path / "r.db")
    s.attach("l", "B", "B/l", 0.0)
    for i in range(20):
        assert s.put("l", fields(i))
    sstore.commit()
    assert carry(s, r) == list(range(20))
    # a resend of everything (the link came up again before the ack) is taken by nobody
    s.attach("l", "B", "B/l", 0.0)
    assert carry(s, r) == []
    assert r.duplicates == 20
    assert ack(s, r, sstore, rstore) == 20
    assert s.stats()["held"] == 0
    # more, then the receiver restarts after its commit: nothing is taken twice
    for i in range(20, 30):
        s.put("l", fields(i))
    sstore.commit()
    assert carry(s, r) == list(range(20, 30))
    rstore.commit()
    rstore.close()
    rstore, r = make(tmp_path / "r.db")
    s.attach("l", "B", "B/l", 0.0)
    assert carry(s, r) == []
    assert ack(s, r, sstore, rstore) == 10
    # the sender restarts with unacknowledged entries: they come again, once
    for i in range(30, 35):
        s.put("l", fields(i))
    sstore.commit()
    sstore.close()
    sstore, s = make(tmp_path / "s.db")
    assert s.stats()["held"] == 5
    s.attach("l", "B", "B/l", 0.0)
    assert carry(s, r) == list(range(30, 35))
    assert ack(s, r, sstore, rstore) == 5
    # the sequence never goes back after everything was acknowledged and a restart
    sstore.close()
    sstore, s = make(tmp_path / "s.db")
    s.attach("l", "B", "B/l", 0.0)
    s.put("l", fields(35))
    sstore.commit()
    assert carry(s, r) == [35]


def test_a_gap_waits_for_the_resend(tmp_path: Path) -> None:
    _, r = make(tmp_path / "r.db")
    assert r.accept("A/l", 9, 1, 1)
    assert not r.accept("A/l", 9, 1, 3)  # 2 was lost on a broken connection
    assert r.gaps == 1
    assert r.accept("A/l", 9, 1, 2)
    assert r.accept("A/l", 9, 1, 3)
    assert r.position("A/l") == (9, 3)
    # a new epoch: the sender's store was wiped; numbering starts again
    assert r.accept("A/l", 10, 1, 1)
    assert r.position("A/l") == (10, 1)


def test_retransmit_after_silence(tmp_path: Path) -> None:
    sstore, s = make(tmp_path / "s.db")
    q = s.attach("l", "B", "B/l", 0.0)
    s.put("l", fields(0))
    sstore.commit()
    _, upto, n = s.next_frame(q, 10)
    s.sent(q, upto, n)
    assert list(s.ready()) == []
    s.retransmit(RETRANSMIT_AFTER / 2)
    assert list(s.ready()) == []
    s.retransmit(RETRANSMIT_AFTER + 0.1)
    assert list(s.ready()) == [q]
    assert q.retransmits == 1


def test_bounds_drop_the_oldest_and_the_receiver_skips_them(tmp_path: Path) -> None:
    drops = Drops()
    sstore, s = make(tmp_path / "s.db", max_msgs=5, drop=drops)
    _, r = make(tmp_path / "r.db")
    s.attach("l", "B", "B/l", 0.0)
    s.detach("l", 1.0)
    for i in range(12):
        s.put("l", fields(i))
    sstore.commit()
    assert s.stats()["held"] == 5
    assert s.stats()["dropped_full"] == 7
    assert drops == {"forward_overflow": 7}  # the node's drop counters are told
    s.attach("l", "B", "B/l", 2.0)
    assert carry(s, r) == list(range(7, 12))
    assert r.lost == 7
    # what the store holds matches memory
    sstore.close()
    sstore, s2 = make(tmp_path / "s.db", max_msgs=5)
    assert [msgpack.unpackb(b)[2] for _, b in s2.queues["B/l"].entries] == [
        str(i).encode() for i in range(7, 12)
    ]


def test_stale_ack_and_unknown_link(tmp_path: Path) -> None:
    _, s = make(tmp_path / "s.db")
    assert not s.put("nowhere", fields(0))  # no queue: the link never came up
    q = s.attach("l", "B", "B/l", 0.0)
    s.put("l", fields(0))
    assert s.on_ack("l", q.epoch + 1, 1, 0.0) == 0
    assert s.stale_acks == 1
    assert s.on_ack("l", q.epoch, 1, 0.0) == 1


def test_a_queue_dropped_and_made_again_before_a_commit_keeps_only_its_new_entries(
    tmp_path: Path,
) -> None:
    # the sticky routes expired (drop, at a tick after the pass's commit) and the link came
    # up in the next pass (a new queue, before the drop was committed): the dropped
    # entries must not stay stored and come back under the new epoch after a restart
    store, s = make(tmp_path / "s.db")
    s.attach("l", "B", "B/l", 0.0)
    for i in range(5):
        s.put("l", fields(i))
    store.commit()
    assert s.drop_queue("l") == 5
    q = s.attach("l", "B", "B/l", 1.0)
    s.put("l", fields(100))
    store.commit()
    assert len(q.entries) == 1
    store.close()
    store, again = make(tmp_path / "s.db")
    q2 = again.queues["B/l"]
    assert q2.epoch == q.epoch
    assert [lseq for lseq, _ in q2.entries] == [1]
    assert msgpack.unpackb(q2.entries[0][1])[2] == b"100"
    assert q2.next_lseq == 2
    assert store.fwd_stored() == 1


def test_the_window_bounds_what_is_in_flight(tmp_path: Path) -> None:
    from zbroker.features.forward import WINDOW

    _, s = make(tmp_path / "s.db")
    q = s.attach("l", "B", "B/l", 0.0)
    for i in range(WINDOW + 300):
        s.put("l", fields(i))
    sent = 0
    while True:
        _, upto, n = s.next_frame(q, 512)
        if n == 0:
            break
        s.sent(q, upto, n)
        sent += n
    assert sent == WINDOW and list(s.ready()) == []
    s.on_ack("l", q.epoch, 100, 0.0)  # room again for 100 of the 300 waiting
    assert list(s.ready()) == [q]
    assert s.next_frame(q, 512)[2] == 100


def test_a_frame_is_cut_before_the_entry_that_would_pass_max_bytes(tmp_path: Path) -> None:
    """Large persistent messages travel a few per PMSGS frame, or alone: a frame the next
    node would refuse (over its max_frame_bytes) would be resent, and refused, forever."""
    _, s = make(tmp_path / "s.db")
    q = s.attach("l", "B", "B/l", 0.0)
    sizes = [30_000, 30_000, 30_000, 100_000, 10, 10, 50_000]
    for i, size in enumerate(sizes):
        s.put("l", ["T.x", b"x" * size, 0, None, "A", 1, i, 1.0, ["A"], None, i])
    frames = []
    while True:
        frame, upto, n = s.next_frame(q, 512, 64 * 1024)
        if n == 0:
            break
        s.sent(q, upto, n)
        _, _, entries = wire.decode_pmsgs(wire.decode_frame(frame))
        frames.append([len(e[2]) for e in entries])
    assert frames == [[30_000, 30_000], [30_000], [100_000], [10, 10, 50_000]]
    # no byte bound: one frame
    _, s2 = make(tmp_path / "s2.db")
    q2 = s2.attach("l", "B", "B/l", 0.0)
    for i, size in enumerate(sizes):
        s2.put("l", ["T.x", b"x" * size, 0, None, "A", 1, i, 1.0, ["A"], None, i])
    assert s2.next_frame(q2, 512)[2] == len(sizes)


def test_an_entry_no_frame_can_hold_is_dropped_once_it_is_the_oldest(tmp_path: Path) -> None:
    """An entry too large for the peer's frames (a smaller max_frame_bytes) is dropped
    only when nothing before it waits for an acknowledgement; ``base`` then tells the
    receiver not to wait for it, and the receiver counts it lost."""
    drops = Drops()
    sstore, s = make(tmp_path / "s.db", drop=drops)
    rstore, r = make(tmp_path / "r.db")
    q = s.attach("l", "B", "B/l", 0.0)
    for i in range(3):
        s.put("l", fields(i))
    s.put("l", ["T.x", b"x" * 100_000, 0, None, "A", 1, 3, 1.0, ["A"], None, 3])
    s.put("l", fields(4))
    sstore.commit()
    assert s.next_size(q) < 100
    frame, upto, n = s.next_frame(q, 3)  # entries 1-3: the small ones
    s.sent(q, upto, n)
    epoch, base, entries = wire.decode_pmsgs(wire.decode_frame(frame))
    assert [r.accept("A/l", epoch, base, m[0]) for m in entries] == [True] * 3
    assert s.next_size(q) > 100_000
    assert not s.drop_next(q)  # entries 1-3 are not acknowledged yet
    assert s.stats()["held"] == 5
    assert ack(s, r, sstore, rstore) == 3
    assert s.drop_next(q)
    assert s.stats()["held"] == 1 and s.stats()["dropped_too_large"] == 1
    assert q.describe()["dropped_too_large"] == 1
    assert drops == {}  # the feature counts it (link_frame_too_large), as it logs it
    frame, upto, n = s.next_frame(q, 10)
    epoch, base, entries = wire.decode_pmsgs(wire.decode_frame(frame))
    assert base == 5 and [m[0] for m in entries] == [5]
    assert r.accept("A/l", epoch, base, 5)
    assert r.lost == 1
    s.sent(q, upto, n)
    assert s.next_size(q) == 0
    # the dropped entry is gone from the store too: a restarted sender does not resend it
    sstore.commit()
    _, s2 = make(tmp_path / "s.db")
    q2 = s2.attach("l", "B", "B/l", 0.0)
    assert [lseq for lseq, _ in q2.entries] == [5]


def test_persistent_dedupe_with_permanent_gaps() -> None:
    """A branch sees every third persistent message of an origin: repeats are caught, new
    ones are not, and the state stays bounded."""
    from zbroker.features.forward import PersistentDedupe

    d = PersistentDedupe(window=100)
    mine = list(range(1, 30_000, 3))
    assert not any(d.seen("A", 1, p) for p in mine)
    assert d.duplicates == 0
    assert all(d.seen("A", 1, p) for p in mine[-40:])  # recent repeats
    assert d.duplicates == 40
    assert len(d._origins[("A", 1)][1]) <= 100
    # out of order within the window, and another incarnation is another stream
    assert not d.seen("A", 1, 30_005) and not d.seen("A", 1, 30_002)
    assert d.seen("A", 1, 30_005)
    assert not d.seen("A", 2, 1)


def test_persistent_dedupe_takes_older_messages_of_an_origin_first_heard_late() -> None:
    """An origin's first message here may be a newer one that took a shorter path while
    older ones wait on another (a relay of a mesh came back; this node had just started):
    the older ones are new here and must be taken, not folded into a floor."""
    from zbroker.features.forward import PersistentDedupe

    d = PersistentDedupe(window=100)
    assert not d.seen("A", 1, 500)
    assert not any(d.seen("A", 1, p) for p in range(1, 500))
    assert all(d.seen("A", 1, p) for p in range(1, 501))
    assert d.duplicates == 500


def test_routed_targets_names_only_what_no_earlier_copy_went_to() -> None:
    r = RoutedTargets(limit=2)
    r.note(("A", 1, 1), ("T1",), "X")
    assert r.new_targets(("A", 1, 1), ("X", "T1", "T2"), "X") == ("T2",)
    assert r.new_targets(("A", 1, 1), ("T2", "T1"), "X") == ()  # (T2 is routed now)
    assert r.new_targets(("A", 1, 1), None, "X") == ()  # computed targets: a plain repeat
    assert r.new_targets(("A", 1, 1), ("^H",), "X") == ()  # on its way to a host
    r.note(("A", 1, 2), None, "X")  # computed here: every way this node had
    assert r.new_targets(("A", 1, 2), ("T3",), "X") == ()
    # not remembered (the limit pushed it out, or a restart): every target but this node
    r.note(("A", 1, 3), ("T1",), "X")
    assert r.new_targets(("A", 1, 1), ("X", "T1"), "X") == ("T1",)
    assert r.new_targets(("A", 1, 1), ("T1",), "X") == ()
