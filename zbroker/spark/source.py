"""The ``zbroker`` Spark data source (Spark's Python Data Source API, pyspark 4.2+).

**Reading** (``spark.read`` / ``spark.readStream``) returns a node's retention log: the
messages on topics its ``[[retain]]`` rules keep, numbered by the node's sequence (``seq``,
gap-free over all retained topics). A streaming query's offsets are those sequence numbers
(``{"seq": N}``, N exclusive), so Spark replays exactly the range of a failed micro-batch:
exactly-once into Spark's sinks. Partitions read ranges of ``rowsPerPartition`` sequences on
the executors and hand Spark Arrow record batches.

Columns: ``topic string, seq long, origin string, incarnation long, origin_seq long,
timestamp timestamp, headers map<string,string>, payload binary`` — ``(origin,
incarnation, origin_seq)`` is the message ID the origin node gave it, ``timestamp`` the
origin node's receive time. With ``valueFormat`` (``msgpack`` or ``json``) and
``valueSchema`` (a DDL list, e.g. ``"price double, qty long"``) the payload is also decoded
into those columns (missing fields are null).

Read options (all strings, names case-insensitive):

==================  =====================================================================
``broker``          node address: ``tcp://HOST:PORT``, a comma-separated failover list, or
                    ``zeroconf://GROUP`` (default ``tcp://127.0.0.1:7100``)
``pattern``         topic pattern to read (default ``>``)
``startingOffset``  ``earliest`` (oldest still retained), ``latest`` (only what arrives
                    from now on), or a sequence number. Default: ``earliest`` for batch,
                    ``latest`` for streaming (as Kafka's source)
``endingOffset``    batch only: ``latest`` (default) or a sequence number (exclusive)
``maxRowsPerTrigger``  streaming: at most this many sequences per micro-batch
``rowsPerPartition``   sequences per Spark partition (default 100000)
``failOnDataLoss``  ``true`` (default): fail with a clear message when part of the range
                    expired from the node's retention log (its bounds dropped it);
                    ``false``: skip the expired part, log how many sequences were skipped
``timeout``         seconds to wait for the node (default 10)
``commitTimeout``   writes: seconds a commit may take to publish its rows (default 600)
``keys``            with security on: the client's secret key — a ``NAME.key_secret``
                    file (``zbroker keygen``) readable on every executor, or its Z85 text
``serverKey``       with security on: the node's public key (``node.key`` file or Z85)
==================  =====================================================================

**Writing** (``df.write`` / ``df.writeStream``) publishes rows into the network exactly once:
column ``topic`` (string; or the ``topic`` option for all rows), ``payload`` (binary or
string), optional ``headers`` (map<string,string>). Each task stages its rows on the node
under a fresh token; the node publishes them only when Spark commits the job or micro-batch
(see :mod:`zbroker.staging`), and an aborted or retried attempt's rows are discarded. A
streaming write also names its micro-batch, with ``writerId`` (default: derived from the
query's ``checkpointLocation`` option), so a batch Spark replays after a restart is applied
once. Write options: ``broker``, ``timeout``, ``commitTimeout``, ``topic``, ``writerId``,
``keys``, ``serverKey``. The node enforces the key's permissions: reading needs subscribe
permission for ``pattern``, writing publish permission for every row's topic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from .. import wire
from ..client import Client
from ..const import DEFAULT_BROKER
from ..topics import validate_pattern, validate_publish_topic
from ..writer import StagedWriter, abort_staged, commit_staged

__all__ = [
    "BASE_SCHEMA",
    "DataLossError",
    "ZbrokerCommitMessage",
    "ZbrokerDataSource",
    "ZbrokerPartition",
]

log = logging.getLogger("zbroker.spark")

BASE_SCHEMA = (
    "topic string, seq long, origin string, incarnation long, origin_seq long, "
    "timestamp timestamp, headers map<string,string>, payload binary"
)
_BASE_COLUMNS = 8
#: rows per READ request from an executor: one round trip per this many rows
_READ_CHUNK = 20_000
DEFAULT_ROWS_PER_PARTITION = 100_000
_VALUE_FORMATS = ("msgpack", "json")


class DataLossError(RuntimeError):
    """Part of the requested range expired from the node's retention log."""


# -- options -----------------------------------------------------------------------------


def _flag(options: Any, name: str, default: bool) -> bool:
    text = str(options.get(name, str(default))).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name}: expected true or false, got {text!r}")


def _int(options: Any, name: str, default: int | None, low: int = 0) -> int | None:
    text = options.get(name)
    if text is None or str(text).strip() == "":
        return default
    try:
        value = int(str(text).strip())
    except ValueError:
        raise ValueError(f"option {name}: expected an integer, got {text!r}") from None
    if value < low:
        raise ValueError(f"option {name}: must be at least {low}, got {value}")
    return value


def _offset(options: Any, name: str, default: str) -> str | int:
    text = str(options.get(name, default)).strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"option {name}: expected earliest, latest or a sequence number, got {text!r}"
        ) from None
    if value < 1:
        raise ValueError(f"option {name}: sequence numbers start at 1, got {value}")
    return value


@dataclass(frozen=True)
class _Conn:
    """What an executor needs to reach the node (picklable)."""

    broker: str
    timeout: float
    commit_timeout: float
    keys: str | None = None  # CurveZMQ: the client's secret key (file or Z85 text)
    server_key: str | None = None  # CurveZMQ: the node's public key (file or Z85 text)

    @classmethod
    def parse(cls, options: Any) -> _Conn:
        broker = str(options.get("broker", DEFAULT_BROKER)).strip()
        if not broker:
            raise ValueError("option broker: empty")
        seconds = []
        for name, default in (("timeout", "10"), ("commitTimeout", "600")):
            try:
                seconds.append(float(options.get(name, default)))
            except ValueError:
                raise ValueError(f"option {name}: not a number: {options.get(name)!r}") from None
            if seconds[-1] <= 0:
                raise ValueError(f"option {name}: must be positive")
        keys, server_key = options.get("keys"), options.get("serverKey")
        if (keys is None) != (server_key is None):
            raise ValueError(
                "options keys and serverKey go together: a node with security on needs both "
                "(the client's secret key and the node's public key)"
            )
        return cls(broker, seconds[0], seconds[1], keys, server_key)

    def client(self, commit: bool = False) -> Client:
        """A client; for a commit, one that waits as long as publishing a batch may take
        (giving up early would make Spark retry a batch the node is still applying)."""
        return Client(
            self.broker,
            timeout=self.commit_timeout if commit else self.timeout,
            keys=self.keys,
            server_key=self.server_key,
        )


@dataclass(frozen=True)
class _ReadOptions:
    conn: _Conn
    pattern: str
    starting: str | int
    ending: str | int
    max_rows_per_trigger: int | None
    rows_per_partition: int
    fail_on_data_loss: bool
    value_format: str | None

    @classmethod
    def parse(cls, options: Any, streaming: bool) -> _ReadOptions:
        pattern = str(options.get("pattern", ">")).strip()
        validate_pattern(pattern)
        value_format = options.get("valueFormat")
        if value_format is not None:
            value_format = str(value_format).strip().lower()
            if value_format not in _VALUE_FORMATS:
                raise ValueError(
                    f"option valueFormat: expected msgpack or json, got {value_format!r}"
                )
            if not options.get("valueSchema"):
                raise ValueError("option valueFormat needs valueSchema (e.g. 'price double')")
        return cls(
            conn=_Conn.parse(options),
            pattern=pattern,
            starting=_offset(options, "startingOffset", "latest" if streaming else "earliest"),
            ending=_offset(options, "endingOffset", "latest"),
            max_rows_per_trigger=_int(options, "maxRowsPerTrigger", None, 1),
            rows_per_partition=_int(options, "rowsPerPartition", DEFAULT_ROWS_PER_PARTITION, 1)
            or DEFAULT_ROWS_PER_PARTITION,
            fail_on_data_loss=_flag(options, "failOnDataLoss", True),
            value_format=value_format,
        )


# -- reading -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _LogInfo:
    first: int
    last: int
    expired_upto: int  # highest sequence a rule retaining the pattern lost (0: none)


def _log_info(client: Client, pattern: str) -> _LogInfo:
    reply = client.request(wire.READ, {"pattern": pattern, "start": 0, "end": 0, "limit": 1})
    return _LogInfo(
        int(reply["first_seq"]), int(reply["last_seq"]), int(reply.get("expired_upto", 0))
    )


def _loss_message(opts: _ReadOptions, start: int, expired: int) -> str:
    return (
        f"sequences {start}..{expired} of pattern {opts.pattern!r} expired from the retention "
        f"log of the node at {opts.conn.broker} (its retain bounds dropped them) before they "
        "were read. Raise the rule's max_msgs/max_bytes/max_age, read more often, or set "
        "failOnDataLoss=false to skip what expired."
    )


def _check_range(opts: _ReadOptions, info: _LogInfo, start: int) -> int:
    """Where reading from ``start`` can begin: ``start``, or past an expired part (when
    failOnDataLoss is false; otherwise DataLossError)."""
    if start > info.last + 1:
        raise DataLossError(
            f"offset {start} is beyond the newest sequence ({info.last}) of the node at "
            f"{opts.conn.broker}: the node's store was reset, or this is another node. "
            "Start the query from a new checkpoint."
        )
    if info.expired_upto >= start:
        if opts.fail_on_data_loss:
            raise DataLossError(_loss_message(opts, start, info.expired_upto))
        log.warning(
            "zbroker: skipping sequences %d..%d of %r: expired from the retention log",
            start,
            info.expired_upto,
            opts.pattern,
        )
        return info.expired_upto + 1
    return start


class ZbrokerPartition(InputPartition):
    """Sequences ``start <= seq < end`` of the retention log."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__((start, end))
        self.start = start
        self.end = end


def _split(start: int, end: int, size: int) -> list[ZbrokerPartition]:
    return [ZbrokerPartition(s, min(s + size, end)) for s in range(start, end, size)]


def _arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def _headers(h: Any) -> list[tuple[str, str]] | None:
    if not h:
        return None if h is None else []
    return [(str(k), v if isinstance(v, str) else str(v)) for k, v in h.items()]


def _decode_values(
    payloads: Sequence[bytes], value_format: str, fields: list[pa.Field]
) -> list[pa.Array]:
    decoded: list[Any] = []
    for raw in payloads:
        try:
            if value_format == "msgpack":
                value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
            else:
                value = json.loads(raw)
        except (ValueError, msgpack.UnpackException):
            value = None  # undecodable: its value columns are null, payload stays as is
        decoded.append(value if isinstance(value, dict) else None)
    out = []
    for f in fields:
        column = [None if v is None else v.get(f.name) for v in decoded]
        try:
            out.append(pa.array(column, type=f.type))
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise ValueError(
                f"valueSchema column {f.name!r} ({f.type}): a payload holds a value of "
                f"another type: {exc}"
            ) from None
    return out


def _to_batch(columns_in: list[Any], schema: pa.Schema, value_format: str | None) -> pa.RecordBatch:
    """An Arrow batch from a columnar READ reply (one array per field)."""
    seqs, topics, payloads, _fmts, headers, origins, incs, oseqs, tss = columns_in
    ts_type = schema.field(5).type
    columns = [
        pa.array(topics, pa.string()),
        pa.array(seqs, pa.int64()),
        pa.array(origins, pa.string()),
        pa.array(incs, pa.int64()),
        pa.array(oseqs, pa.int64()),
        pa.array([round(t * 1_000_000) for t in tss], pa.int64()).cast(ts_type),
        pa.array([_headers(h) for h in headers], schema.field(6).type),
        pa.array(payloads, pa.binary()),
    ]
    if value_format is not None:
        fields = [schema.field(i) for i in range(_BASE_COLUMNS, len(schema))]
        columns += _decode_values(payloads, value_format, fields)
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _read_range(
    opts: _ReadOptions, schema: StructType, start: int, end: int
) -> Iterator[pa.RecordBatch]:
    """The retained messages of ``opts.pattern`` with ``start <= seq < end``, in Arrow
    batches of up to ``_READ_CHUNK`` rows."""
    arrow = _arrow_schema(schema)
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
            if expired >= nxt:
                # expired while the query lagged behind (or between planning and now)
                if opts.fail_on_data_loss:
                    raise DataLossError(_loss_message(opts, nxt, min(expired, end - 1)))
                log.warning(
                    "zbroker: sequences %d..%d of %r expired before they were read; skipped",
                    nxt,
                    min(expired, end - 1),
                    opts.pattern,
                )
            columns = reply["columns"]
            if columns[0]:
                yield _to_batch(columns, arrow, opts.value_format)
            following = int(reply["next"])
            if following <= nxt:
                break  # the node has nothing further in this range
            nxt = following


class _BatchReader(DataSourceReader):
    def __init__(self, opts: _ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.opts
        with opts.conn.client() as client:
            info = _log_info(client, opts.pattern)
        if opts.starting == "earliest":
            start = info.expired_upto + 1
        elif opts.starting == "latest":
            start = info.last + 1
        else:
            assert isinstance(opts.starting, int)
            start = _check_range(opts, info, opts.starting)
        end = info.last + 1 if opts.ending == "latest" else int(opts.ending)
        if end <= start:
            return []
        return _split(start, end, opts.rows_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ZbrokerPartition)
        return _read_range(self.opts, self.schema, partition.start, partition.end)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"seq": N}``: the next sequence to read."""

    def __init__(self, opts: _ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._client: Client | None = None
        self._target: int | None = None  # Trigger.AvailableNow: stop at this offset
        self.skipped = 0

    def __getstate__(self) -> dict[str, Any]:
        # the reader is pickled to executors: they open their own connections
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def _info(self) -> _LogInfo:
        if self._client is None:
            self._client = self.opts.conn.client()
        return _log_info(self._client, self.opts.pattern)

    def initialOffset(self) -> dict[str, int]:
        info = self._info()
        starting = self.opts.starting
        if starting == "earliest":
            return {"seq": info.expired_upto + 1}
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
        return {"seq": max(end, s)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        s, e = int(start["seq"]), int(end["seq"])
        if e <= s:
            return []
        begin = _check_range(self.opts, self._info(), s)
        if begin > s:
            self.skipped += min(begin, e) - s
        return _split(begin, e, self.opts.rows_per_partition) if begin < e else []

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, ZbrokerPartition)
        return _read_range(self.opts, self.schema, partition.start, partition.end)

    def commit(self, end: dict[str, int]) -> None:
        pass  # the node keeps no per-reader cursor: its retain bounds decide what stays

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# -- writing -----------------------------------------------------------------------------


@dataclass
class ZbrokerCommitMessage(WriterCommitMessage):
    """One task attempt's staged rows: the token they wait under and how many there are."""

    token: str
    rows: int


@dataclass(frozen=True)
class _WriteOptions:
    conn: _Conn
    topic: str | None  # fixed topic when the rows have no topic column
    payload_is_string: bool
    has_headers: bool

    @classmethod
    def parse(cls, options: Any, schema: StructType, overwrite: bool) -> _WriteOptions:
        if overwrite:
            raise ValueError(
                "zbroker: mode 'overwrite' is not possible (published messages cannot be "
                "taken back); use mode 'append'"
            )
        fields = {f.name: f.dataType for f in schema.fields}
        topic = options.get("topic")
        if topic is not None:
            validate_publish_topic(str(topic))
        elif not isinstance(fields.get("topic"), StringType):
            raise ValueError("zbroker write: needs a string column 'topic' or the option topic")
        payload = fields.get("payload")
        if not isinstance(payload, BinaryType | StringType):
            raise ValueError(
                "zbroker write: needs a column 'payload' of type binary or string "
                f"(got {payload.simpleString() if payload is not None else 'none'})"
            )
        headers = fields.get("headers")
        if headers is not None and not (
            isinstance(headers, MapType) and isinstance(headers.keyType, StringType)
        ):
            raise ValueError("zbroker write: column 'headers' must be map<string,string>")
        return cls(
            _Conn.parse(options),
            None if topic is None else str(topic),
            isinstance(payload, StringType),
            headers is not None,
        )


def _stage(
    opts: _WriteOptions, batches: Iterator[pa.RecordBatch], group: str
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
    opts: _WriteOptions, writer: StagedWriter, batches: Iterator[pa.RecordBatch]
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


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: _WriteOptions) -> None:
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


class _StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: _WriteOptions, writer_id: str) -> None:
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


def _writer_id(options: Any) -> str:
    given = options.get("writerId")
    if given:
        return str(given)
    checkpoint = options.get("checkpointLocation")
    if checkpoint:
        digest = hashlib.sha256(str(checkpoint).encode()).hexdigest()[:24]
        return f"checkpoint-{digest}"
    raise ValueError(
        "zbroker streaming write: set option writerId (a name unique to this query), or "
        "option checkpointLocation, so that a batch Spark replays after a restart is "
        "published once"
    )


class ZbrokerDataSource(DataSource):
    """Format ``zbroker``: a node's retention log as a table and a stream, and a sink that
    publishes rows into the network exactly once."""

    @classmethod
    def name(cls) -> str:
        return "zbroker"

    def schema(self) -> str:
        values = self.options.get("valueSchema")
        return f"{BASE_SCHEMA}, {values}" if values else BASE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return _BatchReader(_ReadOptions.parse(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return _StreamReader(_ReadOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _BatchWriter(_WriteOptions.parse(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return _StreamWriter(
            _WriteOptions.parse(self.options, schema, overwrite), _writer_id(self.options)
        )
