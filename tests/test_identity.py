"""Unit tests for zbroker.identity: persistent broker ID, starts, incarnation and
data-dir lock.

The incarnation is the largest of the stored one plus one, the wall clock's seconds since
identity.EPOCH and this process's last one for the ID plus one: the clock is stopped at
0 here (fixture ``clock``) unless a test sets it, so the stored rule shows alone."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zbroker import identity
from zbroker.config import validate_broker_id
from zbroker.errors import DataDirError
from zbroker.identity import DataDirLock, Identity, next_incarnation, open_identity

_GENERATED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}-[0-9a-f]{8}$|^zb-[0-9a-f]{8}$")


class Clock:
    """The wall clock identity.py reads: ``secs`` seconds after its EPOCH."""

    def __init__(self) -> None:
        self.secs = 0

    def time(self) -> float:
        return identity.EPOCH + self.secs + 0.5


@pytest.fixture(autouse=True)
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(identity, "time", c)
    monkeypatch.setattr(identity, "_issued", {})  # this process's last incarnations
    return c


@pytest.fixture
def locks() -> Iterator[list[DataDirLock]]:
    """Collects locks so that a failing test does not leave one held."""
    held: list[DataDirLock] = []
    yield held
    for lock in held:
        lock.release()


def _open(locks: list[DataDirLock], data_dir: Path, configured: str | None = None) -> Identity:
    ident, lock = open_identity(data_dir, configured)
    locks.append(lock)
    return ident


def _stored(data_dir: Path) -> object:
    return json.loads((data_dir / "identity.json").read_text("utf-8"))


def test_generates_an_id_once_and_persists_it(tmp_path: Path) -> None:
    data_dir = tmp_path / "node"
    ids = []
    for expected_incarnation in (1, 2, 3):
        ident, lock = open_identity(data_dir, None)
        try:
            assert ident.incarnation == expected_incarnation
            assert ident.data_dir == data_dir
            assert _stored(data_dir) == {
                "broker_id": ident.broker_id,
                "incarnation": expected_incarnation,
                "starts": expected_incarnation,
            }
            assert ident.starts == expected_incarnation
            ids.append(ident.broker_id)
        finally:
            lock.release()
    assert ids[0] == ids[1] == ids[2]
    assert validate_broker_id(ids[0]) == ids[0]
    assert _GENERATED.match(ids[0]), ids[0]
    # no temporary file is left behind
    assert sorted(p.name for p in data_dir.iterdir()) == ["identity.json", "node.lock"]


def test_creates_missing_parent_directories(tmp_path: Path, locks: list[DataDirLock]) -> None:
    data_dir = tmp_path / "a" / "b" / "c"
    ident = _open(locks, data_dir, "alpha")
    assert ident == Identity("alpha", 1, data_dir)
    assert data_dir.is_dir()


def test_configured_id_wins_and_is_persisted(tmp_path: Path) -> None:
    ident, lock = open_identity(tmp_path, None)
    generated = ident.broker_id
    lock.release()
    assert generated != "alpha"

    ident, lock = open_identity(tmp_path, "alpha")
    lock.release()
    assert ident == Identity("alpha", 2, tmp_path)  # the incarnation carries on
    assert _stored(tmp_path) == {"broker_id": "alpha", "incarnation": 2, "starts": 2}

    ident, lock = open_identity(tmp_path, None)  # no longer configured: stays alpha
    lock.release()
    assert ident == Identity("alpha", 3, tmp_path)

    ident, lock = open_identity(tmp_path, "beta")
    lock.release()
    assert ident == Identity("beta", 4, tmp_path)
    assert _stored(tmp_path) == {"broker_id": "beta", "incarnation": 4, "starts": 4}


def test_second_open_while_locked_is_refused(tmp_path: Path, locks: list[DataDirLock]) -> None:
    first = _open(locks, tmp_path, "alpha")
    assert first.incarnation == 1
    with pytest.raises(DataDirError) as info:
        open_identity(tmp_path, "alpha")
    assert "in use" in str(info.value)
    assert str(tmp_path) in str(info.value)
    # the refused open changed nothing
    assert _stored(tmp_path) == {"broker_id": "alpha", "incarnation": 1, "starts": 1}
    with pytest.raises(DataDirError, match="in use"):
        DataDirLock(tmp_path)

    locks.pop().release()
    second = _open(locks, tmp_path, None)  # free again after release
    assert second == Identity("alpha", 2, tmp_path)


def test_release_is_idempotent(tmp_path: Path) -> None:
    _, lock = open_identity(tmp_path, "alpha")
    lock.release()
    lock.release()
    ident, lock = open_identity(tmp_path, None)
    lock.release()
    assert ident.incarnation == 2


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "",
        "[]",
        '"alpha"',
        "42",
        "null",
        '{"broker_id": "alpha", "incarnation": 1',
    ],
)
def test_corrupt_identity_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "identity.json"
    path.write_text(content, "utf-8")
    with pytest.raises(DataDirError) as info:
        open_identity(tmp_path, None)
    assert str(info.value).startswith(f"{path} is unreadable or corrupt: ")
    assert path.read_text("utf-8") == content  # not overwritten
    # the lock was released on the way out: fixing the file lets the node start
    path.write_text('{"broker_id": "alpha", "incarnation": 4}', "utf-8")
    ident, lock = open_identity(tmp_path, None)
    lock.release()
    assert ident == Identity("alpha", 5, tmp_path)


def test_identity_file_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "identity.json").write_bytes(b'{"broker_id": "\xff"}')
    with pytest.raises(DataDirError, match="unreadable or corrupt"):
        open_identity(tmp_path, None)


@pytest.mark.parametrize("stored_id", ["bad id", "-alpha", "a" * 65, 5, ["alpha"], "a/b"])
def test_invalid_stored_id(tmp_path: Path, stored_id: object) -> None:
    path = tmp_path / "identity.json"
    path.write_text(json.dumps({"broker_id": stored_id, "incarnation": 3}), "utf-8")
    with pytest.raises(DataDirError) as info:
        open_identity(tmp_path, None)
    assert str(info.value).startswith(f"{path}: broker ID: {stored_id!r} is not a valid name")
    # a configured ID replaces the bad one
    ident, lock = open_identity(tmp_path, "alpha")
    lock.release()
    assert ident == Identity("alpha", 4, tmp_path)


def test_invalid_configured_id(tmp_path: Path) -> None:
    with pytest.raises(DataDirError, match="'no way' is not a valid name"):
        open_identity(tmp_path, "no way")
    assert not (tmp_path / "identity.json").exists()
    # and the lock was released
    ident, lock = open_identity(tmp_path, "ok")
    lock.release()
    assert ident.incarnation == 1


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ({"broker_id": "alpha"}, 1),  # no incarnation yet
        ({"broker_id": "alpha", "incarnation": 41}, 42),
        ({"broker_id": "alpha", "incarnation": "7"}, 1),  # not an int: start over
        ({"broker_id": "alpha", "incarnation": None}, 1),
        ({"broker_id": "alpha", "incarnation": 2, "extra": "kept out"}, 3),
    ],
)
def test_incarnation_from_stored_file(
    tmp_path: Path, stored: dict[str, object], expected: int
) -> None:
    (tmp_path / "identity.json").write_text(json.dumps(stored), "utf-8")
    ident, lock = open_identity(tmp_path, None)
    lock.release()
    assert ident == Identity("alpha", expected, tmp_path)
    assert _stored(tmp_path) == {"broker_id": "alpha", "incarnation": expected, "starts": expected}


def test_unusable_data_dir(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(DataDirError, match="cannot create data directory"):
        open_identity(blocker / "node", None)


@pytest.mark.parametrize(
    ("hostname", "prefix"),
    [
        ("myhost", "myhost-"),
        ("myhost.example.com", "myhost-"),
        ("_under_score_", "under-score-"),
        ("héllo wörld", "h-llo-w-rld-"),
        ("x" * 100, "x" * 40 + "-"),
        ("", "zb-"),
        ("---", "zb-"),
    ],
)
def test_generated_id_from_hostname(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostname: str, prefix: str
) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: hostname)
    ident, lock = open_identity(tmp_path, None)
    lock.release()
    assert ident.broker_id.startswith(prefix)
    assert re.fullmatch(r"[0-9a-f]{8}", ident.broker_id[len(prefix) :])
    assert validate_broker_id(ident.broker_id) == ident.broker_id


def test_generated_ids_differ_between_data_dirs(tmp_path: Path) -> None:
    a, la = open_identity(tmp_path / "a", None)
    b, lb = open_identity(tmp_path / "b", None)
    la.release()
    lb.release()
    assert a.broker_id != b.broker_id
    assert (a.incarnation, b.incarnation) == (1, 1)


def test_a_fresh_data_dir_takes_the_clock(tmp_path: Path, clock: Clock) -> None:
    # a node restarted under its ID on a fresh directory (the embedded default, a
    # container without a volume) must not reuse its previous life's incarnation: its
    # peers' dedupe still holds those message IDs. Its starts stay 1: a second node
    # under the ID is told from a restart by them (links/handshake.py, rival)
    clock.secs = 1_000
    first, lock = open_identity(tmp_path / "first", "alpha")
    lock.release()
    again, lock = open_identity(tmp_path / "again", "alpha")  # the same second, process
    lock.release()
    clock.secs += 1
    other = identity.next_incarnation("beta", 0)  # another ID is not held back
    identity._issued.clear()  # as another process would, a second later
    later, lock = open_identity(tmp_path / "later", "alpha")
    lock.release()
    assert (first.incarnation, again.incarnation, other, later.incarnation) == (
        1_000,
        1_001,
        1_001,
        1_001,
    )
    assert (first.starts, again.starts, later.starts) == (1, 1, 1)
    assert _stored(tmp_path / "later") == {"broker_id": "alpha", "incarnation": 1_001, "starts": 1}


def test_a_kept_data_dir_grows_whatever_the_clock_does(tmp_path: Path, clock: Clock) -> None:
    clock.secs = 5_000
    seen = []
    for back in (0, 3_000, 1_000):  # the clock steps back: the stored one still wins
        clock.secs -= back
        identity._issued.clear()  # each start in a process of its own
        ident, lock = open_identity(tmp_path, "alpha")
        lock.release()
        seen.append((ident.incarnation, ident.starts))
    assert seen == [(5_000, 1), (5_001, 2), (5_002, 3)]


def test_a_file_from_before_the_count_counts_from_its_incarnation(tmp_path: Path) -> None:
    (tmp_path / "identity.json").write_text('{"broker_id": "alpha", "incarnation": 7}', "utf-8")
    ident, lock = open_identity(tmp_path, None)
    lock.release()
    assert (ident.incarnation, ident.starts) == (8, 8)


def test_next_incarnation_on_the_real_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(identity, "time", time)
    now = int(time.time()) - identity.EPOCH
    inc = next_incarnation("real", 0)
    assert now <= inc < 2**31  # the queue feature's stamps: incarnation << 32, below 2**63
    assert next_incarnation("real", 0) == inc + 1  # this process's next life of the ID
    assert next_incarnation("real", 2**30) == 2**30 + 1
