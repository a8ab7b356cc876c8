"""The node allowlist: which broker ID owns which public key.

A directory of public certificates named ``BROKER_ID.key`` (the file name binds the key to
the ID), or a text file of ``BROKER_ID PUBLIC_KEY`` lines. One key, one ID.
"""

from __future__ import annotations

from pathlib import Path

import zmq.auth

from ..errors import ConfigError
from ..names import validate_broker_id
from .keys import is_z85

__all__ = ["load_allowlist"]


def load_allowlist(path: Path) -> dict[str, bytes]:
    """Broker ID -> Z85 public key, from a directory of ``ID.key`` certificates or a file
    of ``ID KEY`` lines (``#`` starts a comment at the start of a line or after the key)."""
    out: dict[str, bytes] = {}
    keys_seen: dict[bytes, str] = {}

    def add(broker_id: str, key: bytes, where: str) -> None:
        validate_broker_id(broker_id, where)
        if broker_id in out:
            raise ConfigError(f"{where}: broker ID {broker_id!r} is listed twice")
        if key in keys_seen:
            raise ConfigError(
                f"{where}: the key of {broker_id!r} is also {keys_seen[key]!r}'s: one key, one ID"
            )
        out[broker_id] = key
        keys_seen[key] = broker_id

    if path.is_dir():
        try:
            files = sorted(path.glob("*.key"))
        except OSError as exc:
            raise ConfigError(f"allowlist {path}: cannot list it: {exc.strerror}") from exc
        for f in files:
            try:
                public, _ = zmq.auth.load_certificate(f)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"allowlist {f}: not a public key certificate: {exc}") from exc
            add(f.stem, public, f"allowlist {f}")
        return out
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeError) as exc:
        raise ConfigError(f"allowlist {path}: cannot read it: {exc}") from exc
    for n, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        if len(parts) > 2 and parts[2].startswith("#"):
            parts = parts[:2]  # a trailing comment ('#' is also a Z85 digit: not inside)
        if len(parts) != 2 or not is_z85(parts[1]):
            raise ConfigError(
                f"allowlist {path} line {n}: expected 'BROKER_ID PUBLIC_KEY' (40-character Z85)"
            )
        add(parts[0], parts[1].encode(), f"allowlist {path} line {n}")
    return out
