"""The store's SQLite file when it cannot be used: a corrupt file or one SQLite can only
read is refused at open with an error naming the file (not a node that starts and dies at
its first write), and a write that fails (a full disk) raises its own error, not a failed
rollback's. Real SQLite files in tmp_path; a real node for the start."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zbroker import Broker
from zbroker.errors import DataDirError
from zbroker.store import RetainRule, Store


def test_a_corrupt_store_is_refused_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    path.write_bytes(b"not a database at all " * 200)
    with pytest.raises(DataDirError, match="is corrupt") as err:
        Store(path)
    assert str(path) in str(err.value)


def test_a_node_on_a_corrupt_store_fails_its_start_clearly(tmp_path: Path) -> None:
    (tmp_path / "store.sqlite3").write_bytes(b"junk" * 1000)
    broker = Broker(host="127.0.0.1", port=0, data_dir=tmp_path, discovery=False)
    with pytest.raises(DataDirError, match=r"store\.sqlite3 is corrupt"):
        broker.start()
    assert not broker.running


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make ``path`` unwritable even for root (immutable), or skip."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("cannot make a file immutable here (chattr)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_store_that_can_only_be_read_is_refused_at_open(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    Store(path, (RetainRule("A.>"),)).close()
    with read_only(path), pytest.raises(DataDirError, match="cannot be written") as err:
        Store(path, (RetainRule("A.>"),))
    assert str(path) in str(err.value)
    Store(path).close()  # writable again: opens


def test_a_full_disk_raises_its_own_error_and_keeps_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    store = Store(path, (RetainRule("A.>"),))
    try:
        store.retain("A.>", "A.X", b"first", 0, None, "o", 1, 1, time.time())
        assert store.commit() == 1
        pages = store.db.execute("PRAGMA page_count").fetchone()[0]
        store.db.execute(f"PRAGMA max_page_count={pages}")  # the disk is full now
        store.retain("A.>", "A.X", b"x" * 200_000, 0, None, "o", 1, 2, time.time())
        with pytest.raises(sqlite3.OperationalError, match="full"):
            store.commit()
        assert not store.db.in_transaction
    finally:
        store.db.close()
    again = Store(path, (RetainRule("A.>"),))
    try:
        assert [r[2] for r in again.read(1, None, 10)] == [b"first"]
    finally:
        again.close()
