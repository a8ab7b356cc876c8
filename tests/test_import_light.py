"""``import zbroker`` stays light: the core package never imports pyspark or pyarrow (the
Spark connector is an optional extra, imported only from ``zbroker.spark.source``)."""

from __future__ import annotations

import subprocess
import sys


def test_import_zbroker_does_not_import_spark() -> None:
    code = (
        "import sys, zbroker, zbroker.client, zbroker.writer, zbroker.spark; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'py4j')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
