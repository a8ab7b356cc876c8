"""Reading a node's retention log: partitions of sequence ranges, the batch reader and the
stream reader (offsets ``{"seq": N}``), and the data-loss checks both apply when part of a
range expired from the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .. import wire
from ..client import Client
from .arrow import arrow_schema, to_batch
from .options import ReadOptions

__all__ = ["BatchReader", "DataLossError", "StreamReader", "ZbrokerPartition"]

log = logging.getLogger("zbroker.spark")

#: rows per READ request from an executor: one round trip per this many rows
_READ_CHUNK = 20_000


class DataLossError(RuntimeError):
    """Part of the requested range expired from the node's retention log."""


@dataclass(frozen=True)
class LogInfo:
    first: int
    last: int
    expired_upto: int  # highest sequence a rule retaining the pattern lost (0: none)


def log_info(client: Client, pattern: str) -> LogInfo:
    reply = client.request(wire.READ, {"pattern": pattern, "start": 0, "end": 0, "limit": 1})
    return LogInfo(
        int(reply["first_seq"]), int(reply["last_seq"]), int(reply.get("expired_upto", 0))
    )


def _loss_message(opts: ReadOptions, start: int, expired: int) -> str:
    return (
        f"sequences {start}..{expired} of pattern {opts.pattern!r} expired from the retention "
        f"log of the node at {opts.conn.broker} (its retain bounds dropped them) before they "
        "were read. Raise the rule's max_msgs/max_bytes/max_age, read more often, or set "
        "failOnDataLoss=false to skip what expired."
    )


def _check_range(opts: ReadOptions, info: LogInfo, start: int, floor: int = 0) -> int:
    """Check that reading from ``start`` misses nothing: DataLossError if part of the log
    from ``start`` on expired (above ``floor``: what expired up to it was gone before the
    query set out to read it) and failOnDataLoss is true; with it false, the loss is
    logged and what is left of the range is read. Returns how many sequences the loss
    spans (0: none).

    Nothing is skipped: ``expired_upto`` is the highest sequence lost by *any* rule
    whose pattern overlaps, and another rule may still keep rows below it."""
    if start > info.last + 1:
        raise DataLossError(
            f"offset {start} is beyond the newest sequence ({info.last}) of the node at "
            f"{opts.conn.broker}: the node's store was reset, or this is another node. "
            "Start the query from a new checkpoint."
        )
    if info.expired_upto < start or info.expired_upto <= floor:
        return 0
    first = max(start, floor + 1)
    if opts.fail_on_data_loss:
        raise DataLossError(_loss_message(opts, first, info.expired_upto))
    log.warning(
        "zbroker: sequences %d..%d of %r expired from the retention log before they were "
        "read; reading what is left",
        first,
        info.expired_upto,
        opts.pattern,
    )
    return info.expired_upto - first + 1


class ZbrokerPartition(InputPartition):
    """Sequences ``start <= seq < end`` of the retention log; what expired up to
    ``floor`` did so before the query set out to read it (not a loss)."""

    def __init__(self, start: int, end: int, floor: int = 0) -> None:
        super().__init__((start, end, floor))
        self.start = start
        self.end = end
        self.floor = floor


def _split(start: int, end: int, size: int, floor: int = 0) -> list[ZbrokerPartition]:
    return [ZbrokerPartition(s, min(s + size, end), floor) for s in range(start, end, size)]


def _read_range(
    opts: ReadOptions, schema: StructType, part: ZbrokerPartition
) -> Iterator[pa.RecordBatch]:
    """The retained messages of ``opts.pattern`` in ``part``'s range, in Arrow batches
    of up to ``_READ_CHUNK`` rows."""
    start, end, floor = part.start, part.end, part.floor
    arrow = arrow_schema(schema)
    with opts.conn.client() as client:
        nxt = start
        while nxt < end:
            reply = client.request(
                wire.READ,
                {
                    "pattern": opts.pattern,
                    "start": nxt,
                    "end": end,
                    "limit": _READ_CHUNK,
                    "columns": True,
                },
            )
            expired = int(reply.get("expired_upto", 0))
            if expired >= nxt and expired > floor:
                # expired while the query lagged behind (or between planning and now)
                first = max(nxt, floor + 1)
                if opts.fail_on_data_loss:
                    raise DataLossError(_loss_message(opts, first, min(expired, end - 1)))
                log.warning(
                    "zbroker: sequences %d..%d of %r expired before they were read; reading "
                    "what is left",
                    first,
                    min(expired, end - 1),
                    opts.pattern,
                )
                floor = expired  # (said once for what is lost now)
            columns = reply["columns"]
            if columns[0]:
                yield to_batch(columns, arrow, opts.value_format)
            following = int(reply["next"])
            if following <= nxt:
                break  # the node has nothing further in this range
            nxt = following


class BatchReader(DataSourceReader):
    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with opts.conn.client() as client:
            info = log_info(client, opts.pattern)
        floor = 0
        if opts.starting == "earliest":
            # the oldest row still retained: what one rule expired may lie above rows
            # another rule keeps, and those are still there to read
            start, floor = info.first, info.expired_upto
        elif opts.starting == "latest":
            start = info.last + 1
        else:
            assert isinstance(opts.starting, int)
            start = opts.starting
            _check_range(opts, info, start)
        end = info.last + 1 if opts.ending == "latest" else int(opts.ending)
        if end <= start:
            return []
        return _split(start, end, opts.rows_per_partition, floor)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ZbrokerPartition)
        return _read_range(self.opts, self.schema, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"seq": N}``: the next sequence to read. A query started at
    ``earliest`` below what some rule had expired also carries ``"floor"`` (that
    expired sequence) while its offsets are not past it: what expired up to it was gone
    before the query began, which is no loss."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._client: Client | None = None
        self._target: int | None = None  # Trigger.AvailableNow: stop at this offset
        #: sequences of the ranges planned so far that had expired before they were read
        self.skipped = 0

    def __getstate__(self) -> dict[str, Any]:
        # the reader is pickled to executors: they open their own connections
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _info(self) -> LogInfo:
        if self._client is None:
            self._client = self.opts.conn.client()
        return log_info(self._client, self.opts.pattern)

    def initialOffset(self) -> dict[str, int]:
        info = self._info()
        starting = self.opts.starting
        if starting == "earliest":
            return _offset(info.first, info.expired_upto)
        if starting == "latest":
            return {"seq": info.last + 1}
        assert isinstance(starting, int)
        return {"seq": starting}

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_rows_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._info().last + 1

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        s = int(start["seq"])
        info = self._info()
        if s > info.last + 1:
            _check_range(self.opts, info, s)  # raises: the node's log is behind the query
        end = info.last + 1
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, s + limit.max_rows)
        return _offset(max(end, s), int(start.get("floor", 0)))

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        s, e = int(start["seq"]), int(end["seq"])
        if e <= s:
            return []
        floor = int(start.get("floor", 0))
        lost = _check_range(self.opts, self._info(), s, floor)
        if lost:
            first = max(s, floor + 1)
            self.skipped += max(0, min(e, first + lost) - first)
        return _split(s, e, self.opts.rows_per_partition, floor)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ZbrokerPartition)
        return _read_range(self.opts, self.schema, partition)

    def commit(self, end: dict[str, int]) -> None:
        pass  # the node keeps no per-reader cursor: its retain bounds decide what stays

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


def _offset(seq: int, floor: int) -> dict[str, int]:
    """The offset of ``seq``, with ``floor`` while it still matters (at or above it)."""
    return {"seq": seq, "floor": floor} if floor >= seq else {"seq": seq}
