"""Options of the ``zbroker`` data source: parsed and checked on the driver, into frozen
(picklable) values that the readers and writers carry to the executors.

What each option means is documented in :mod:`zbroker.spark.source`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from ..client import Client
from ..const import DEFAULT_BROKER
from ..topics import validate_pattern, validate_publish_topic

__all__ = ["DEFAULT_ROWS_PER_PARTITION", "Conn", "ReadOptions", "WriteOptions", "writer_id"]

DEFAULT_ROWS_PER_PARTITION = 100_000
#: the zbroker columns of a read, before the valueSchema ones (:data:`.arrow.BASE_SCHEMA`)
_BASE_COLUMNS = 8
_VALUE_FORMATS = ("msgpack", "json")


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


def _offset(options: Any, name: str, default: str, words: tuple[str, ...]) -> str | int:
    """A sequence number, or one of ``words`` (earliest, latest)."""
    text = str(options.get(name, default)).strip().lower()
    if text in words:
        return text
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"option {name}: expected {', '.join(words)} or a sequence number, got {text!r}"
        ) from None
    if value < 1:
        raise ValueError(f"option {name}: sequence numbers start at 1, got {value}")
    return value


@dataclass(frozen=True)
class Conn:
    """What an executor needs to reach the node (picklable)."""

    broker: str
    timeout: float
    commit_timeout: float
    keys: str | None = None  # CurveZMQ: the client's secret key (file or Z85 text)
    server_key: str | None = None  # CurveZMQ: the node's public key (file or Z85 text)

    @classmethod
    def parse(cls, options: Any) -> Conn:
        broker = str(options.get("broker", DEFAULT_BROKER)).strip()
        if not broker:
            raise ValueError("option broker: empty")
        seconds = []
        for name, default in (("timeout", "10"), ("commitTimeout", "600")):
            try:
                seconds.append(float(options.get(name, default)))
            except ValueError:
                raise ValueError(f"option {name}: not a number: {options.get(name)!r}") from None
            if not (seconds[-1] > 0 and math.isfinite(seconds[-1])):
                raise ValueError(
                    f"option {name}: must be a positive number of seconds, got "
                    f"{options.get(name)!r}"
                )
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
class ReadOptions:
    conn: Conn
    pattern: str
    starting: str | int
    ending: str | int
    max_rows_per_trigger: int | None
    rows_per_partition: int
    fail_on_data_loss: bool
    value_format: str | None

    @classmethod
    def parse(cls, options: Any, streaming: bool, schema: StructType | None = None) -> ReadOptions:
        """The read options, checked (with ``schema``, the table's: its valueSchema
        columns too)."""
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
        elif options.get("valueSchema"):
            # its columns would be in the table with nothing to fill them
            raise ValueError(
                "option valueSchema needs valueFormat (msgpack or json): how to decode the "
                "payload into its columns"
            )
        if schema is not None:
            _check_value_columns(schema)
        return cls(
            conn=Conn.parse(options),
            pattern=pattern,
            starting=_offset(
                options,
                "startingOffset",
                "latest" if streaming else "earliest",
                ("earliest", "latest"),
            ),
            ending=_offset(options, "endingOffset", "latest", ("latest",)),
            max_rows_per_trigger=_int(options, "maxRowsPerTrigger", None, 1),
            rows_per_partition=_int(options, "rowsPerPartition", DEFAULT_ROWS_PER_PARTITION, 1)
            or DEFAULT_ROWS_PER_PARTITION,
            fail_on_data_loss=_flag(options, "failOnDataLoss", True),
            value_format=value_format,
        )


def _check_value_columns(schema: StructType) -> None:
    """No valueSchema column may take the name of a zbroker column (Spark compares
    names without case)."""
    names = [f.name.lower() for f in schema.fields]
    base = names[:_BASE_COLUMNS]
    for name in names[_BASE_COLUMNS:]:
        if name in base or names.count(name) > 1:
            raise ValueError(
                f"option valueSchema: column {name!r} is named twice in the table (its "
                f"columns come after {', '.join(base)}): rename it"
            )


@dataclass(frozen=True)
class WriteOptions:
    conn: Conn
    topic: str | None  # fixed topic when the rows have no topic column
    payload_is_string: bool
    has_headers: bool

    @classmethod
    def parse(cls, options: Any, schema: StructType, overwrite: bool) -> WriteOptions:
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
            Conn.parse(options),
            None if topic is None else str(topic),
            isinstance(payload, StringType),
            headers is not None,
        )


def writer_id(options: Any) -> str:
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
