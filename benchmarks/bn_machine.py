"""What a benchmark's figures were measured on: the machine, the software versions, the
digest of the zbroker sources in use and how many of its modules run compiled."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
from pathlib import Path
from typing import Any

import msgpack
import zmq


def source_digest() -> str:
    """sha256 (12 hex digits) of the zbroker sources in use: ties figures to a code state."""
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("zbroker")
    if spec is None or spec.origin is None:
        return "unknown"
    root = Path(spec.origin).parent
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": cpu,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "pyzmq": zmq.pyzmq_version(),
        "libzmq": zmq.zmq_version(),
        "msgpack": ".".join(map(str, msgpack.version)),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "zbroker_src_sha256": source_digest(),
        "zbroker_compiled": compiled_state(),
    }


def compiled_state() -> str:
    """How many of zbroker's compiled modules (zbroker/_compiled.py) run compiled here."""
    import importlib

    try:
        from zbroker import _compiled
    except ImportError:  # a tree from before the compiled modules
        return "no compiled modules"
    for name in _compiled.COMPILED:
        importlib.import_module(name)
    done = sum(_compiled.loaded().values())
    pure = f" ({_compiled.ENV})" if _compiled.pure_python() else ""
    return f"{done} of {len(_compiled.COMPILED)} compiled{pure}"
