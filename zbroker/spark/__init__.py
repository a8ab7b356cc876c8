"""zbroker for Apache Spark: a data source (format ``zbroker``) on Spark's Python Data
Source API, for batch and streaming reads of a node's retention log and exactly-once
batch and streaming writes into the network.

Install with the extra: ``pip install 'zbroker[spark]'`` (pyspark 4.2+ and pyarrow).
Register the format once per session, then use it like any other::

    import zbroker.spark
    zbroker.spark.register(spark)

    trades = (spark.readStream.format("zbroker")
              .option("broker", "tcp://127.0.0.1:7100")
              .option("pattern", "TRADES.>")
              .load())

Options and semantics are documented in :mod:`zbroker.spark.source` and in the README
("Spark"). Importing :mod:`zbroker` never imports pyspark; this package imports it only
when the data source class is first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .source import ZbrokerDataSource

__all__ = ["ZbrokerDataSource", "register"]


def register(spark: Any) -> None:
    """Register the ``zbroker`` format with a SparkSession."""
    from .source import ZbrokerDataSource

    spark.dataSource.register(ZbrokerDataSource)


def __getattr__(name: str) -> Any:
    if name == "ZbrokerDataSource":
        from .source import ZbrokerDataSource

        return ZbrokerDataSource
    raise AttributeError(name)
