"""Client: publish to and subscribe from a zbroker node.

    with Client("tcp://127.0.0.1:7100") as client:
        sub = client.subscribe("PRICE.>", lambda msg: print(msg.topic, msg.payload))
        client.publish("PRICE.STOCK.IBM", b"101.5")
        ...
        sub.unsubscribe()

The client is given the node's well-known address only; a HELLO request returns the publish
and delivery ports. Threads: publish() sends on the caller's thread (under a lock, on a
socket nothing else touches); one client thread owns the control and delivery sockets and
runs every callback, in arrival order. Other threads reach it through an inproc channel.

``subscribe()`` returns once the node has the subscription: after the pattern the client
subscribes a one-off sync key on the same connection, and the node echoes it back only
after it has processed what came before it.

The parts, each with its own state (no part reaches into another's):

* :mod:`.api` — :class:`Client`, the public API and composition root;
* :mod:`.messages` — :class:`Message`, :class:`MessageId`, :class:`Subscription`;
* :mod:`.publisher` — the PUSH socket, its lock and publish batching; :mod:`.fanout`;
* :mod:`.subscriber` — the subscription registry and the SUB socket's deliveries;
* :mod:`.durables` — durable subscriptions, the consumer's side;
* :mod:`.reads` — reading the node's retention log;
* :mod:`.sessions` — sessions with nodes, heartbeats and failover; :mod:`.requests`;
* :mod:`.thread` — the client thread, which owns sessions and subscriber;
  :mod:`.channel` — how user threads reach it;
* :mod:`.locators` — where nodes are found (addresses, zeroconf);
  :mod:`.credentials` — CURVE keys and the node's permissions.
"""

from __future__ import annotations

from .api import Client
from .locators import parse_address
from .messages import Gap, Message, MessageId, Subscription

__all__ = ["Client", "Gap", "Message", "MessageId", "Subscription", "parse_address"]
