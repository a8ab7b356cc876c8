"""A node's persistent identity: its broker ID and incarnation, kept in its data directory.

The broker ID is generated once (when neither config nor flag names one) and persisted, so
a restarted node keeps its name. Two numbers tell a start from the node's earlier ones:

* ``starts`` counts the starts on this data directory (1 on a fresh one). Link
  handshakes carry it: a peer holding a link up to another process under the same ID
  takes a newcomer with more starts for that node restarted, and one with no more for a
  second node misconfigured with the ID (:func:`zbroker.links.handshake.rival`);
* the ``incarnation`` keys message IDs (the dedupe at every node, rule 5 of the engine)
  and the stamps that order a node's floods. It is the largest of the stored one plus
  one, the wall clock in seconds since :data:`EPOCH` and the previous one this process
  gave the same broker ID plus one (:func:`next_incarnation`): a node restarted under
  its ID on a fresh data directory (the embedded default, a temporary directory; a
  container without a volume) thus gets a larger incarnation than its previous life,
  whose message IDs its peers' dedupe still holds (unless both lives started within one
  second in two processes); a kept directory always gives a strictly larger one,
  whatever the clock does. It stays below 2**31 (until 2092): the queue feature stamps
  ``incarnation << 32`` plus a count, under the wire's 2**63.

The data directory is locked
(``flock``) while a node runs: two nodes sharing one directory would share one identity.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from .errors import ConfigError, DataDirError
from .names import validate_broker_id

__all__ = ["EPOCH", "Identity", "next_incarnation", "open_identity"]

_IDENTITY_FILE = "identity.json"
_LOCK_FILE = "node.lock"
#: the wall clock's origin for incarnations (2024-01-01 UTC, in Unix seconds)
EPOCH = 1_704_067_200
#: the last incarnation this process gave each broker ID (two lives within one second)
_issued: dict[str, int] = {}
_issued_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class Identity:
    broker_id: str
    incarnation: int
    data_dir: Path
    starts: int = field(default=1, compare=False)  # starts on this data directory


def next_incarnation(broker_id: str, previous: int) -> int:
    """The incarnation of a start of ``broker_id`` after ``previous`` (0 for a fresh data
    directory): larger than it, than this process's last one for the ID, and than any
    earlier start's in another process a second ago or more on a clock that did not go
    back."""
    with _issued_lock:
        inc = max(previous + 1, int(time.time()) - EPOCH, _issued.get(broker_id, 0) + 1)
        _issued[broker_id] = inc
        return inc


def _generated_id() -> str:
    host = re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname().split(".")[0])[:40].strip("-")
    return f"{host or 'zb'}-{secrets.token_hex(4)}"


class DataDirLock:
    """Holds an exclusive flock on ``node.lock`` until :meth:`release`."""

    def __init__(self, data_dir: Path) -> None:
        self._file: IO[str] | None = None
        path = data_dir / _LOCK_FILE
        try:
            f = open(path, "a+")  # noqa: SIM115 - held open for the node's lifetime
        except OSError as exc:
            raise DataDirError(f"cannot open {path}: {exc.strerror}") from exc
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            f.close()
            raise DataDirError(
                f"data directory {data_dir} is in use by another running node "
                "(give each node its own --data-dir)"
            ) from exc
        self._file = f

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _stored_int(stored: dict[str, object], key: str) -> int:
    value = stored.get(key, 0)
    return value if type(value) is int and value >= 0 else 0


def open_identity(data_dir: Path, configured_id: str | None) -> tuple[Identity, DataDirLock]:
    """Lock ``data_dir``, load or create the identity, count the start and advance the
    incarnation (:func:`next_incarnation`), persist them.

    A configured ID wins over a persisted one (and is persisted in its place): the operator
    renamed the node on purpose.
    """
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DataDirError(f"cannot create data directory {data_dir}: {exc.strerror}") from exc
    lock = DataDirLock(data_dir)
    try:
        path = data_dir / _IDENTITY_FILE
        stored: dict[str, object] = {}
        if path.exists():
            try:
                stored = json.loads(path.read_text("utf-8"))
                if not isinstance(stored, dict):
                    raise ValueError("not an object")
            except (OSError, ValueError) as exc:
                raise DataDirError(f"{path} is unreadable or corrupt: {exc}") from exc
        broker_id = configured_id or stored.get("broker_id") or _generated_id()
        try:
            validate_broker_id(broker_id, f"{path}: broker ID")
        except ConfigError as exc:
            raise DataDirError(str(exc)) from exc
        assert isinstance(broker_id, str)
        # a file from before the count: its incarnation counted the starts
        starts = _stored_int(stored, "starts" if "starts" in stored else "incarnation") + 1
        incarnation = next_incarnation(broker_id, _stored_int(stored, "incarnation"))
        tmp = path.with_suffix(".tmp")
        try:
            body = {"broker_id": broker_id, "incarnation": incarnation, "starts": starts}
            tmp.write_text(json.dumps(body), "utf-8")
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise DataDirError(f"cannot write {path}: {exc.strerror}") from exc
        return Identity(broker_id, incarnation, data_dir, starts), lock
    except BaseException:
        lock.release()
        raise
