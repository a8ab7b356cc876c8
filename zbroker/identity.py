"""A node's persistent identity: its broker ID and incarnation, kept in its data directory.

The broker ID is generated once (when neither config nor flag names one) and persisted, so
a restarted node keeps its name; the incarnation increments on every start, so peers and
message IDs can tell a restarted node from its previous life. The data directory is locked
(``flock``) while a node runs: two nodes sharing one directory would share one identity.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .errors import ConfigError, DataDirError
from .names import validate_broker_id

__all__ = ["Identity", "open_identity"]

_IDENTITY_FILE = "identity.json"
_LOCK_FILE = "node.lock"


@dataclass(frozen=True, slots=True)
class Identity:
    broker_id: str
    incarnation: int
    data_dir: Path


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


def open_identity(data_dir: Path, configured_id: str | None) -> tuple[Identity, DataDirLock]:
    """Lock ``data_dir``, load or create the identity, bump the incarnation, persist it.

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
            validate_broker_id(broker_id, str(path))
        except ConfigError as exc:
            raise DataDirError(str(exc)) from exc
        assert isinstance(broker_id, str)
        previous = stored.get("incarnation", 0)
        incarnation = (previous if isinstance(previous, int) else 0) + 1
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(
                json.dumps({"broker_id": broker_id, "incarnation": incarnation}), "utf-8"
            )
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            raise DataDirError(f"cannot write {path}: {exc.strerror}") from exc
        return Identity(broker_id, incarnation, data_dir), lock
    except BaseException:
        lock.release()
        raise
