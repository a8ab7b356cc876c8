"""The network benchmark's figure (e): ``zbroker simulate TOPOLOGY --json`` run as a
subprocess from the repository, timed, stopped by its PID."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_node as bn  # log
from _common import REPO

log = bn.log
ROOT = REPO

SIM_TIMEOUT_S = 240.0
DEFAULT_TOPOLOGY = "config/topologies/mesh200.toml"


def _zbroker_exe() -> str:
    exe = Path(sys.executable).parent / "zbroker"
    if exe.exists():
        return str(exe)
    found = shutil.which("zbroker")
    if found is None:
        raise RuntimeError("the zbroker command is not installed next to this Python")
    return found


def run_simulator(topology: str) -> dict[str, Any]:
    """``zbroker simulate TOPOLOGY --json`` as a subprocess, timed; stopped by PID."""
    cmd = [_zbroker_exe(), "simulate", topology, "--json"]
    shown = f"zbroker simulate {topology} --json"
    log(f"(e) {shown} (cwd {ROOT}) ...")
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak_rss = 0
    try:
        out, err = proc.communicate(timeout=SIM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"command": shown, "error": f"did not finish within {SIM_TIMEOUT_S:g} s"}
    finally:
        if proc.poll() is None:
            proc.terminate()  # by PID
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
    wall = time.perf_counter() - t0
    try:
        import resource

        peak_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    except (ImportError, OSError):
        pass
    if proc.returncode != 0:
        return {
            "command": shown,
            "error": f"exit status {proc.returncode}: {err.strip()[-500:]}",
            "wall_s": wall,
        }
    try:
        report = json.loads(out)
    except ValueError:
        return {"command": shown, "error": f"not JSON: {out[:200]!r}", "wall_s": wall}
    return {"command": shown, "wall_s": wall, "max_child_rss_bytes": peak_rss, "report": report}
