"""Arrow conversion of reads: the columns of the ``zbroker`` table and the Arrow record
batches built from the node's columnar READ replies (decoding the payload into value
columns when ``valueFormat`` is set).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import msgpack
import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

__all__ = ["BASE_SCHEMA", "arrow_schema", "to_batch"]

BASE_SCHEMA = (
    "topic string, seq long, origin string, incarnation long, origin_seq long, "
    "timestamp timestamp, headers map<string,string>, payload binary"
)
_BASE_COLUMNS = 8


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def _headers(h: Any) -> list[tuple[str, str | None]] | None:
    if not h:
        return None if h is None else []
    # (a header of no value reads as a null, not the text "None")
    return [(str(k), v if v is None or isinstance(v, str) else str(v)) for k, v in h.items()]


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


def to_batch(columns_in: list[Any], schema: pa.Schema, value_format: str | None) -> pa.RecordBatch:
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
