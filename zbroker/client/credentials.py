"""The client's side of security: CURVE keys for its sockets, and the node's permissions.

:class:`Credentials` is built from the ``keys``/``server_key`` options. It makes each
socket's next connect CURVE (``secure``), and says whether the node's HELLO allows a
publish or subscribe (``check``). A node without security sends no permissions: then
everything is allowed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import zmq

from ..errors import ConfigError, PermissionDenied
from ..topics import match
from .locators import is_zeroconf, static_endpoints

__all__ = ["Credentials"]

# why a node may not answer, said with BrokerUnreachable: a secure node answers only
# clients with known keys, and a plain client's handshake fails there without a word
_CURVE_HINT = (
    " (check keys and server_key: the node refuses a client key it does not know, and a"
    " server_key that is not its own fails the handshake)"
)
_PLAIN_HINT = " (is a node running there? one with security on needs keys and server_key)"

_ALL: Any = object()  # "no permissions sent": a node without security allows everything


def _curve_options(
    broker: str, keys: str | Path | None, server_key: str | Path | None
) -> tuple[tuple[bytes, bytes] | None, dict[str, bytes]]:
    """(own key pair, node endpoint -> node public key; "*" for every endpoint)."""
    if keys is None and server_key is None:
        return None, {}
    if keys is None or server_key is None:
        raise ConfigError("security needs both keys (this client's) and server_key (the node's)")
    from ..security import load_key_pair, read_public_key

    pair = load_key_pair(keys)
    if is_zeroconf(broker):
        raise ConfigError("keys/server_key need tcp:// addresses (not zeroconf://)")
    parts = [p for p in str(server_key).split(",") if p.strip()]
    if len(parts) == 1:
        return pair, {"*": read_public_key(parts[0])}
    endpoints = static_endpoints(broker)
    if len(parts) != len(endpoints):
        raise ConfigError(
            f"server_key lists {len(parts)} keys for {len(endpoints)} node addresses: give "
            "one key, or one per address in the same order"
        )
    return pair, {ep: read_public_key(k) for ep, k in zip(endpoints, parts, strict=True)}


class Credentials:
    """This client's key pair and the nodes' public keys (none: plain sockets)."""

    def __init__(self, broker: str, keys: str | Path | None, server_key: str | Path | None):
        self._curve, self._server_keys = _curve_options(broker, keys, server_key)

    @property
    def enabled(self) -> bool:
        return self._curve is not None

    @property
    def unreachable_hint(self) -> str:
        """What to check when no node answered (said after BrokerUnreachable's text)."""
        return _CURVE_HINT if self._curve is not None else _PLAIN_HINT

    def secure(self, sock: zmq.Socket[bytes], endpoint: str) -> None:
        """With keys: make ``sock``'s next connect (to the node at ``endpoint``) CURVE."""
        if self._curve is None:
            return
        key = self._server_keys.get(endpoint) or self._server_keys.get("*")
        if key is None:
            raise ConfigError(f"no server_key for {endpoint}")
        sock.setsockopt(zmq.CURVE_SERVERKEY, key)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, self._curve[0])
        sock.setsockopt(zmq.CURVE_SECRETKEY, self._curve[1])

    def check(self, hello: dict[str, Any], kind: str, what: str) -> None:
        """Raise PermissionDenied if the node that said ``hello`` does not let this client
        ``kind`` (publish/subscribe) ``what``."""
        perms = hello.get("permissions", _ALL) if self._curve is not None else _ALL
        if perms is _ALL:
            return
        allowed = (perms or {}).get(kind) or []
        if kind == "publish":
            ok = any(match(p, what) for p in allowed)
        else:
            from ..security import covers

            ok = any(covers(p, what) for p in allowed)
        if not ok:
            raise PermissionDenied(
                f"permission denied: {hello.get('user') or 'this key'} may not {kind} "
                f"to {what!r} (allowed: "
                f"{', '.join(allowed) or 'nothing'})"
            )
