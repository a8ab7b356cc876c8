"""``benchmarks/_common.end_on_signals``: a benchmark past its deadline, or sent SIGTERM,
leaves through its ``finally`` blocks (where it stops its children by PID), with the
reason, instead of dying with its children still running."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.helpers import ROOT

SCRIPT = """
import signal, sys, time
sys.path.insert(0, sys.argv[1])
from _common import end_on_signals
deadline = None if sys.argv[2] == "none" else int(sys.argv[2])
end_on_signals(deadline, "trial")
if deadline is None:  # no deadline: no alarm set, SIGALRM left as it was
    assert signal.alarm(0) == 0 and signal.getsignal(signal.SIGALRM) is signal.SIG_DFL
try:
    print("running", flush=True)
    time.sleep(30)
finally:
    print("finally ran", flush=True)
"""


def _start(deadline_s: int | None) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", SCRIPT, str(ROOT / "benchmarks"), str(deadline_s).lower()]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize(
    ("deadline_s", "term", "reason", "returncode"),
    [
        (1, False, "TimeoutError: trial exceeded 1 s", 1),
        # an uncaught KeyboardInterrupt ends Python as SIGINT would
        (60, True, "KeyboardInterrupt: signal 15", -signal.SIGINT),
        # bench_compare and bench_peers: no deadline, SIGTERM still ends through finally
        (None, True, "KeyboardInterrupt: signal 15", -signal.SIGINT),
    ],
)
def test_a_run_ends_through_its_finally_blocks(
    deadline_s: int | None, term: bool, reason: str, returncode: int
) -> None:
    proc = _start(deadline_s)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "running\n"
        if term:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out == "finally ran\n"
    assert reason in err
    assert proc.returncode == returncode
