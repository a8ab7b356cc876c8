"""Exactly-once writes: each task stages its rows on the node under a fresh token, and the
job's (or micro-batch's) commit publishes them, or its abort discards them (see
:mod:`zbroker.staging`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from .. import wire
from ..writer import StagedWriter, abort_staged, commit_staged
from .options import WriteOptions

__all__ = ["BatchWriter", "StreamWriter", "ZbrokerCommitMessage"]

log = logging.getLogger("zbroker.spark")


@dataclass
class ZbrokerCommitMessage(WriterCommitMessage):
    """One task attempt's staged rows: the token they wait under and how many there are."""

    token: str
    rows: int


def _stage(
    opts: WriteOptions, batches: Iterator[pa.RecordBatch], group: str
) -> ZbrokerCommitMessage:
    """Stage every row of a task on the node under a fresh token (nothing is published).
    ``group`` names the write job: its commit drops the tokens of failed attempts."""
    with opts.conn.client() as client:
        writer = StagedWriter(client, group=group)
        try:
            _stage_rows(opts, writer, batches)
        except BaseException:
            # this attempt will not be committed: free its rows now, not at the node's TTL
            try:
                writer.abort()
            except Exception:  # the node is gone too: its TTL will clean up
                log.warning("zbroker: could not abort staged token %s", writer.token)
            raise
        token, rows = writer.finish()
    return ZbrokerCommitMessage(token, rows)


def _stage_rows(
    opts: WriteOptions, writer: StagedWriter, batches: Iterator[pa.RecordBatch]
) -> None:
    add = writer.add_raw
    for batch in batches:
        n = batch.num_rows
        topics = [opts.topic] * n if opts.topic is not None else batch.column("topic").to_pylist()
        payloads = batch.column("payload").to_pylist()
        headers = batch.column("headers").to_pylist() if opts.has_headers else [None] * n
        for topic, payload, h in zip(topics, payloads, headers, strict=True):
            if topic is None or payload is None:
                raise ValueError("zbroker write: a row has a null topic or payload")
            if opts.payload_is_string:
                payload = payload.encode("utf-8")
            add(topic, payload, wire.FMT_BYTES, None if h is None else dict(h))


def _tokens(messages: Sequence[Any]) -> list[tuple[str, int]]:
    return [(m.token, m.rows) for m in messages if isinstance(m, ZbrokerCommitMessage)]


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.group = uuid.uuid4().hex  # made on the driver, pickled to every task

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ZbrokerCommitMessage:
        return _stage(self.opts, iterator, self.group)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        with self.opts.conn.client(commit=True) as client:
            commit_staged(client, _tokens(messages), group=self.group)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        with self.opts.conn.client(commit=True) as client:
            abort_staged(client, [t for t, _ in _tokens(messages)], group=self.group)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: WriteOptions, writer_id: str) -> None:
        self.opts = opts
        self.writer_id = writer_id
        # one per query run: micro-batches run one after another, so when batch N commits
        # every other token of the group belongs to a failed attempt of batch N
        self.group = uuid.uuid4().hex

    def write(self, iterator: Iterator[pa.RecordBatch]) -> ZbrokerCommitMessage:
        return _stage(self.opts, iterator, self.group)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with self.opts.conn.client(commit=True) as client:
            reply = commit_staged(
                client, _tokens(messages), writer=self.writer_id, batch=batchId, group=self.group
            )
        if reply.get("duplicate"):
            log.info(
                "zbroker: batch %d of writer %s was applied before (a replay): not published again",
                batchId,
                self.writer_id,
            )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        with self.opts.conn.client(commit=True) as client:
            abort_staged(client, [t for t, _ in _tokens(messages)], group=self.group)
