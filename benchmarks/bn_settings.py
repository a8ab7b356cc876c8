"""The single-node benchmark's settings (``bench_node.py``), shared by every process of a
run and by the benchmarks built on it: the address, payload size, topics, queue limits,
warm-up and deadlines, the targets of issue 2, and ``log`` (progress on stderr)."""

from __future__ import annotations

import os
import sys
from typing import Any

HOST = "127.0.0.1"
#: payload bytes; bench_compare.py --size sets another for every process of a run
PAYLOAD_SIZE = int(os.environ.get("ZBROKER_BENCH_PAYLOAD", "100"))
TOPIC = "BENCH.DATA"
WARM_TOPIC = "BENCH.WARM"
STOP_TOPIC = "BENCH.STOP"
HWM = 100_000  # zbroker's DEFAULT_HWM, used for the raw sockets too
WARMUP = 1_000  # messages sent (on a separate topic / shape) before any measured run
LATENCY_LEAD_IN = 100  # first latency messages not counted (connection/cache warm-up)
IDLE_END_S = 3.0  # subscriber gives up this long after the publisher finished
CHILD_DEADLINE_S = 240.0  # a child process never lives longer than this
RUN_DEADLINE_S = 300  # the whole benchmark (SIGALRM in the parent)

TARGET_RATE = 150_000.0
TARGET_RATIO = 0.15
TARGET_P99_MS = 1.5
LATENCY_RATE = 2_000.0


def log(*args: Any) -> None:
    print(*args, file=sys.stderr, flush=True)
