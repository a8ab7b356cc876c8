"""Exactly-once writes from a client: stage rows now, publish them on commit.

The client side of :mod:`zbroker.staging`. A task that may run more than once (a Spark
task, a retried job step) writes through a :class:`StagedWriter`: its rows travel to the
node in chunks under a fresh token and wait there. Whoever decides which attempts count
then calls :func:`commit_staged` with their tokens (the node publishes the rows, all or
none) or :func:`abort_staged` (the rows vanish)::

    with Client(address) as client:
        w = StagedWriter(client)
        for row in rows:
            w.add("ORDERS.NEW", payload)
        token, n = w.finish()
        commit_staged(client, [(token, n)], writer="orders-job", batch=17)

With ``writer`` and ``batch`` the node applies a batch once, however often the commit is
sent (a job replayed after a restart). Payloads are bytes as given, or msgpack-encoded
values, as with :meth:`Client.publish`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from . import wire
from .client import Client
from .client.messages import encode_payload as _encode_payload
from .errors import PayloadError
from .topics import validate_publish_topic

__all__ = ["STAGE_CHUNK_ROWS", "StagedWriter", "abort_staged", "commit_staged"]

#: Rows per STAGE request, at most: large enough to amortize a round trip.
STAGE_CHUNK_ROWS = 2000
#: bytes of rows per STAGE request, at most; never more than the node takes in one frame
#: (its max_frame_bytes, less _STAGE_ENVELOPE), which it counts and drops without a reply
_STAGE_CHUNK_BYTES = 4 * 1024 * 1024
_STAGE_ENVELOPE = 1024  # the request around the rows: op, id, token, part, group
_ROW_OVERHEAD = 16  # msgpack of [topic, payload, fmt, headers] beyond topic and payload
_packb = wire.packb  # one Packer per thread (wire.codec), not one per call


class StagedWriter:
    """Rows of one task attempt, staged on the client's node under one fresh token."""

    def __init__(self, client: Client, token: str | None = None, group: str | None = None) -> None:
        self.client = client
        self.token = token or uuid.uuid4().hex
        self.group = group  # commits/aborts naming it drop this token if not named
        self.rows = 0
        self._part = 0
        self._chunk: list[list[Any]] = []
        self._chunk_bytes = 0

    def add(self, topic: str, payload: Any, headers: dict[str, Any] | None = None) -> None:
        """Stage one message (sent to the node in chunks; nothing is published yet)."""
        validate_publish_topic(topic)
        raw, fmt = _encode_payload(payload)  # as Client.publish encodes it
        if headers is not None and (
            not isinstance(headers, dict) or not all(isinstance(k, str) for k in headers)
        ):
            raise PayloadError("headers must be a dict with string keys")
        self.add_raw(topic, raw, fmt, headers)

    def add_raw(self, topic: str, raw: bytes, fmt: int, headers: dict[str, Any] | None) -> None:
        """Stage an already-encoded row (the node checks the topic). Raises PayloadError
        for a row the node could not take in any request."""
        size = len(raw) + len(topic.encode()) + _ROW_OVERHEAD
        if headers:
            size += len(_packb(headers))
        budget = self._budget()
        if size > budget:
            raise PayloadError(
                f"row of about {size} bytes on {topic!r} is over what the node takes in one "
                f"request ({budget} bytes: its max_frame_bytes less the request around it)"
            )
        if self._chunk and self._chunk_bytes + size > budget:
            self.flush()  # the request would not fit: this row starts the next one
        self._chunk.append([topic, raw, fmt, headers])
        self._chunk_bytes += size
        if len(self._chunk) >= STAGE_CHUNK_ROWS:
            self.flush()

    def _budget(self) -> int:
        node = self.client._frame_max  # announced in the node's HELLO reply (0: unknown)
        if node <= 0:
            return _STAGE_CHUNK_BYTES
        return max(1, min(_STAGE_CHUNK_BYTES, node - _STAGE_ENVELOPE))

    def add_many(self, rows: Iterable[tuple[str, Any, dict[str, Any] | None]]) -> None:
        for topic, payload, headers in rows:
            self.add(topic, payload, headers)

    def flush(self) -> None:
        """Send the rows added since the last flush (raises RequestError if refused)."""
        if not self._chunk:
            return
        chunk, self._chunk, self._chunk_bytes = self._chunk, [], 0
        body: dict[str, Any] = {"token": self.token, "part": self._part, "rows": chunk}
        if self.group is not None:
            body["group"] = self.group
        reply = self.client.request(wire.STAGE, body)
        self._part += 1
        self.rows += len(chunk)
        if reply.get("rows") != self.rows:  # the node lost part of the token (a restart)
            raise PayloadError(
                f"node holds {reply.get('rows')} rows under token {self.token}, "
                f"expected {self.rows}: the task must be retried"
            )

    def abort(self) -> int:
        """Drop what this writer staged (its task failed); returns rows dropped."""
        self._chunk, self._chunk_bytes = [], 0
        return abort_staged(self.client, [self.token])

    def finish(self) -> tuple[str, int]:
        """Flush and return ``(token, rows)`` for the commit."""
        self.flush()
        return self.token, self.rows


def commit_staged(
    client: Client,
    tokens: Iterable[tuple[str, int]],
    *,
    writer: str | None = None,
    batch: int | None = None,
    group: str | None = None,
) -> dict[str, Any]:
    """Publish the rows staged under ``tokens`` (all or none). With ``writer`` and
    ``batch``, a batch applied before is not applied again (``duplicate`` in the reply).
    With ``group``, the group's other staged tokens are dropped afterwards.
    Returns ``{applied, duplicate}``; raises RequestError when the node refuses."""
    # a task that had no rows staged nothing: its token does not exist on the node
    body: dict[str, Any] = {"tokens": [[t, n] for t, n in tokens if n > 0]}
    if group is not None:
        body["group"] = group
    if writer is not None:
        if batch is None:
            raise ValueError("a commit naming its writer needs the batch number too")
        body["writer"] = writer
        body["batch"] = batch
    try:
        return client.request(wire.STAGE_COMMIT, body)
    except PayloadError as exc:
        # one request names every token: a job of some 25,000 tasks passes 1 MiB
        raise PayloadError(
            f"the commit of {len(body['tokens'])} tokens does not fit in one request to the "
            f"node ({exc}); raise the node's limits.max_frame_bytes or write with fewer "
            "partitions. Nothing was published; the rows stay staged until aborted"
        ) from exc


def abort_staged(client: Client, tokens: Iterable[str], group: str | None = None) -> int:
    """Discard the rows staged under ``tokens`` (and all of ``group``'s); returns how many
    rows were dropped. Unlike a commit, an abort needs no atomicity: many tokens go in
    several requests that each fit the node's limit (the group with the last)."""
    names = list(tokens)
    budget = client._frame_max - _STAGE_ENVELOPE if client._frame_max else 0
    chunks: list[list[str]] = [[]]
    size = 0
    for t in names:
        n = len(t.encode()) + 5  # str header, at most 5 bytes
        if budget > 0 and chunks[-1] and size + n > budget:
            chunks.append([])
            size = 0
        chunks[-1].append(t)
        size += n
    discarded = 0
    for i, chunk in enumerate(chunks):
        body: dict[str, Any] = {"tokens": chunk}
        if group is not None and i == len(chunks) - 1:
            body["group"] = group
        reply = client.request(wire.STAGE_ABORT, body)
        discarded += int(reply.get("discarded", 0))
    return discarded
