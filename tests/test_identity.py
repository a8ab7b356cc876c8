"""Unit tests for zbroker.identity: persistent broker ID, incarnation and data-dir lock."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from zbroker.config import validate_broker_id
from zbroker.errors import DataDirError
from zbroker.identity import DataDirLock, Identity, open_identity

_GENERATED = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,39}-[0-9a-f]{8}$|^zb-[0-9a-f]{8}$")


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
            }
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
    assert _stored(tmp_path) == {"broker_id": "alpha", "incarnation": 2}

    ident, lock = open_identity(tmp_path, None)  # no longer configured: stays alpha
    lock.release()
    assert ident == Identity("alpha", 3, tmp_path)

    ident, lock = open_identity(tmp_path, "beta")
    lock.release()
    assert ident == Identity("beta", 4, tmp_path)
    assert _stored(tmp_path) == {"broker_id": "beta", "incarnation": 4}


def test_second_open_while_locked_is_refused(tmp_path: Path, locks: list[DataDirLock]) -> None:
    first = _open(locks, tmp_path, "alpha")
    assert first.incarnation == 1
    with pytest.raises(DataDirError) as info:
        open_identity(tmp_path, "alpha")
    assert "in use" in str(info.value)
    assert str(tmp_path) in str(info.value)
    # the refused open changed nothing
    assert _stored(tmp_path) == {"broker_id": "alpha", "incarnation": 1}
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
    assert str(info.value).startswith(f"{path}: {stored_id!r} is not a valid broker ID")
    # a configured ID replaces the bad one
    ident, lock = open_identity(tmp_path, "alpha")
    lock.release()
    assert ident == Identity("alpha", 4, tmp_path)


def test_invalid_configured_id(tmp_path: Path) -> None:
    with pytest.raises(DataDirError, match="'no way' is not a valid broker ID"):
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
    assert _stored(tmp_path) == {"broker_id": "alpha", "incarnation": expected}


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
