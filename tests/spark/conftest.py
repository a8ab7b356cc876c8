"""Fixtures of the Spark tests: one local-mode SparkSession for the whole run (all of its
sockets on 127.0.0.1), the ``zbroker`` format registered on it, and helpers to wait for
streaming queries by their progress, never by sleeping.

Every test here is marked ``spark``. They are skipped, with the reason, only when Java or
the ``spark`` extra (pyspark, pyarrow) is missing; ``make test`` installs the extra.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SKIP_REASON: str | None = None
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    SKIP_REASON = "Java (17+) is not installed: Spark needs a JVM"
else:
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        SKIP_REASON = f"the spark extra is not installed ({exc}); pip install -e '.[spark]'"

LOG4J = Path(__file__).with_name("log4j2.properties")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            if SKIP_REASON:
                item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test run's SparkSession: local[2] with up to 4 attempts per task (the write
    tests make a task fail once), UI off, everything on 127.0.0.1, UTC."""
    # executors are Python processes started by the JVM: they must import this checkout
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    import zbroker.spark

    session = (
        SparkSession.builder.master("local[2,4]")
        .appName("zbroker-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    zbroker.spark.register(session)
    try:
        yield session
    finally:
        session.stop()
