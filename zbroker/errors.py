"""The zbroker error tree: every error the library raises on purpose derives from one base.

    ZBrokerError
     ├── ConfigError            a config file, key, flag or value is wrong
     ├── InvalidTopic           a topic name or pattern breaks the naming rules
     ├── ReservedTopic          a client tried to publish under ``$ZB.``
     ├── PayloadError           a payload or header cannot be encoded
     ├── ProtocolError          a frame is malformed (wrong count, not msgpack, bad types, too big)
     ├── AddressInUse           a port the node must bind is taken
     ├── DataDirError           the data directory cannot be used (locked, unwritable)
     ├── BrokerUnreachable      no node answered within the timeout
     ├── PublishTimeout         the node did not accept a message within the timeout
     ├── RequestError           the node answered a control request with an error
     │    └── SubscriptionCancelled  a missing-topic handler cancelled a subscribe/fetch
     ├── SelectorError          a message selector is not valid (where, and what was expected)
     └── ClientClosed           the client was used after close()

Lower-layer errors (``zmq.ZMQError``, ``OSError``, ``msgpack`` exceptions) are mapped to
these with ``raise ... from`` at the boundary where they happen.
"""

from __future__ import annotations


class ZBrokerError(Exception):
    """Base class of every error zbroker raises on purpose."""


class ConfigError(ZBrokerError):
    """A config file, key, command-line flag or value is wrong; the message names which."""


class InvalidTopic(ZBrokerError, ValueError):
    """A topic name or subscription pattern breaks the naming rules; the message says how."""


class ReservedTopic(InvalidTopic):
    """Topics under ``$ZB.`` belong to the node: clients may subscribe to them, not publish."""


class PayloadError(ZBrokerError, TypeError):
    """A payload or header value cannot be encoded with msgpack."""


class ProtocolError(ZBrokerError):
    """A frame from a client or a peer is malformed. ``reason`` is a short counter key."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class AddressInUse(ZBrokerError):
    """A port the node must bind is already in use."""


class DataDirError(ZBrokerError):
    """The node's data directory cannot be used (another node holds it, or it is unwritable)."""


class BrokerUnreachable(ZBrokerError):
    """No node answered at the given address within the timeout."""


class PublishTimeout(ZBrokerError):
    """The node did not take a published message within the timeout (it is gone or overloaded)."""


class RequestError(ZBrokerError):
    """The node refused or failed a control request; the message is the node's reason."""


class SubscriptionCancelled(RequestError):
    """A missing-topic handler answered ``cancel`` to this subscribe or fetch."""


class NoSuchDurable(RequestError, LookupError):
    """``delete_durable(name, missing_ok=False)``: no node holds a durable of that name."""


class ClientClosed(ZBrokerError):
    """The client was used after ``close()``."""


class PermissionDenied(RequestError):
    """With security on: this client's key may not publish to that topic or subscribe to
    that pattern (the node's permissions for the key say so)."""


class SelectorError(ZBrokerError, ValueError):
    """A message selector is not valid: ``position`` (0-based character offset) is where,
    ``expected`` what would have been valid there, ``found`` what was there instead."""

    def __init__(self, text: str, position: int, expected: str, found: str = "") -> None:
        where = f"selector error at position {position}: expected {expected}"
        if found:
            where += f", found {found}"
        super().__init__(f"{where}\n  {text}\n  {' ' * position}^")
        self.text = text
        self.position = position
        self.expected = expected
        self.found = found
