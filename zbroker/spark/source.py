"""The ``zbroker`` Spark data source (Spark's Python Data Source API, pyspark 4.2+).

**Reading** (``spark.read`` / ``spark.readStream``) returns a node's retention log: the
messages on topics its ``[[retain]]`` rules keep, numbered by the node's sequence (``seq``,
gap-free over all retained topics). A streaming query's offsets are those sequence numbers
(``{"seq": N}``, N exclusive; :class:`.readers.StreamReader` tells of ``floor``), so Spark
replays exactly the range of a failed micro-batch: exactly-once into Spark's sinks.
Partitions read ranges of ``rowsPerPartition`` sequences on the executors and hand Spark
Arrow record batches.

Columns: ``topic string, seq long, origin string, incarnation long, origin_seq long,
timestamp timestamp, headers map<string,string>, payload binary`` — ``(origin,
incarnation, origin_seq)`` is the message ID the origin node gave it, ``timestamp`` the
origin node's receive time; a header's value reads as its text (``str``), a header of
no value (None) as null. With ``valueFormat`` (``msgpack`` or ``json``) and
``valueSchema`` (a DDL list, e.g. ``"price double, qty long"``) the payload is also decoded
into those columns (missing fields are null; their names must differ from the columns
above, and neither option goes without the other).

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
                    ``false``: log the expired sequences and read what is left
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

This module is the data source Spark sees; the work is done by :mod:`.options` (parsing
and checking the options above), :mod:`.readers` (partitions, batch and stream readers,
data-loss checks), :mod:`.arrow` (READ replies to Arrow batches) and :mod:`.writers`
(staged, exactly-once writes).
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType

from .arrow import BASE_SCHEMA
from .options import ReadOptions, WriteOptions, writer_id
from .readers import BatchReader, DataLossError, StreamReader, ZbrokerPartition
from .writers import BatchWriter, StreamWriter, ZbrokerCommitMessage

__all__ = [
    "BASE_SCHEMA",
    "DataLossError",
    "ZbrokerCommitMessage",
    "ZbrokerDataSource",
    "ZbrokerPartition",
]


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
        return BatchReader(ReadOptions.parse(self.options, streaming=False, schema=schema), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return StreamReader(ReadOptions.parse(self.options, streaming=True, schema=schema), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return BatchWriter(WriteOptions.parse(self.options, schema, overwrite))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        return StreamWriter(
            WriteOptions.parse(self.options, schema, overwrite), writer_id(self.options)
        )
