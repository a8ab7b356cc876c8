"""CurveZMQ security: key files, the node allowlist, client permissions, the ZAP handler.

Off by default (plain mode, for a trusted LAN). When a node's config enables it:

* every socket that crosses a network is a CURVE socket (:mod:`.curve`): the node's
  control ROUTER, publish PULL and deliver XPUB are CURVE servers with the node's key pair
  (:mod:`.keys`); each link DEALER is a CURVE client that authenticates the peer it dials
  by that peer's public key (from the allowlist, :mod:`.allowlist`) and presents the
  node's own key;
* a connecting key is authenticated by the node's ZAP handler (:mod:`.zap`), which maps it
  to a *user id*: ``node:BROKER_ID`` for a key of the allowlist, ``client:NAME`` for a
  client key; any other key is refused, logged with the peer address and counted
  (``auth_failures``). ZeroMQ stamps the user id on every frame of that connection;
* a link handshake is accepted only from a ``node:`` user whose ID is the one the HELLO
  claims (a node cannot claim another node's ID), and every later frame on that link
  must come from the same user;
* clients publish and subscribe only where their permissions allow (``publish`` and
  ``subscribe`` pattern lists, :mod:`.permissions`; what each control op needs is declared
  in :mod:`.ops`, what arrives on the publish PULL is filtered by :mod:`.publish_filter`).
  The node tells a client its permissions in the HELLO reply, so the client library
  refuses locally with a clear :class:`~zbroker.errors.PermissionDenied`; a client that
  sends anyway is refused by the node (nothing published, nothing delivered; counted and
  logged, :mod:`.logs`).

:class:`Security` (:mod:`.runtime`) is what a node holds when security is on.
"""

from __future__ import annotations

from .allowlist import load_allowlist
from .keys import NODE_KEY_NAME, generate_keys, load_key_pair, read_public_key
from .permissions import ClientRule, covers, load_clients
from .runtime import Security
from .zap import CONN_PROPERTY, ZAP_DOMAIN

__all__ = [
    "CONN_PROPERTY",
    "NODE_KEY_NAME",
    "ZAP_DOMAIN",
    "ClientRule",
    "Security",
    "covers",
    "generate_keys",
    "load_allowlist",
    "load_clients",
    "load_key_pair",
    "read_public_key",
]
