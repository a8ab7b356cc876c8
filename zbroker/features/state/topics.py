"""The stateful topics one node holds: its table (:mod:`zbroker.store.state`), a trie to
find what a pattern matches, and the writes: set, remove, and replicas taken from a
primary. Each write returns the message that tells subscribers (the feature publishes it).
"""

from __future__ import annotations

import time
from typing import Any

from ...stateful import OWNER, REMOVED, VERSION, Value, next_version
from ...store.state import StateRow, StateTable
from ...sublist import TopicTrie

__all__ = ["StateTopics", "update_headers"]

#: a message to publish: (topic, payload, fmt, headers)
Publish = tuple[str, bytes, int, dict[str, Any]]


def update_headers(
    headers: dict[str, Any] | None, version: int, owner: str, removed: bool = False
) -> dict[str, Any]:
    """The headers of the message that carries a value (or a removal: with the headers
    of the value it removes, so a subscription whose selector took the value takes its
    removal too)."""
    out = dict(headers) if headers else {}
    out[VERSION] = version
    out[OWNER] = owner
    if removed:
        out[REMOVED] = True
    return out


class StateTopics:
    def __init__(self, table: StateTable, me: str) -> None:
        self.table = table
        self.me = me
        self.trie = TopicTrie()
        for topic in table.rows:
            self.trie.add(topic)

    def _version(self, topic: str) -> int:
        row = self.table.rows.get(topic)
        return next_version(time.time_ns() // 1000, 0 if row is None else row.version)

    def set(
        self, topic: str, payload: bytes, fmt: int, headers: dict[str, Any] | None
    ) -> tuple[int, Publish]:
        """This node becomes (or stays) the topic's owner: its version, and the update."""
        version = self._version(topic)
        self.table.put(StateRow(topic, payload, fmt, headers, version, self.me, time.time()))
        self.trie.add(topic)
        return version, (topic, payload, fmt, update_headers(headers, version, self.me))

    def remove(self, pattern: str) -> list[Publish]:
        """Remove the topics ``pattern`` matches that this node owns (replicas go when
        their primary removes them): a tombstone each, and the removal to publish."""
        out: list[Publish] = []
        rows = self.table.rows
        for topic in self.trie.match(pattern):
            row = rows[topic]
            if row.removed or row.replica_of is not None:
                continue
            version = self._version(topic)
            self.table.put(StateRow(topic, b"", 0, None, version, self.me, time.time(), True))
            out.append((topic, b"", 0, update_headers(row.headers, version, self.me, True)))
        return out

    def values(self, pattern: str) -> tuple[list[Value], list[list[Any]]]:
        """(current values, removals ``[topic, version, owner]``) ``pattern`` matches."""
        rows = self.table.rows
        values: list[Value] = []
        gone: list[list[Any]] = []
        for topic in self.trie.match(pattern):
            row = rows[topic]
            if row.removed:
                gone.append([topic, row.version, row.owner])
            else:
                values.append(row.value())
        return values, gone

    def count(self) -> dict[str, int]:
        owned = replicas = tombstones = 0
        for row in self.table.rows.values():
            if row.removed:
                tombstones += 1
            elif row.replica_of is None:
                owned += 1
            else:
                replicas += 1
        return {"owned": owned, "replicas": replicas, "tombstones": tombstones}
