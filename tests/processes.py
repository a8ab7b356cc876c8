"""Subprocesses of the tests, stopped by PID: :class:`Proc` (one process, its stdout and
stderr read line by line on background threads) and :class:`Procs` (every process one test
started, all stopped at its end, also when it fails). Nothing is ever killed by name. Every
process gets :func:`subprocess_env`: no inherited ZBROKER_* settings, discovery off, a
private XDG_DATA_HOME. The ``procs`` fixture (``tests/conftest.py``) hands out a Procs."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: the installed console script next to the interpreter running the tests
ZBROKER_SCRIPT = Path(sys.executable).parent / "zbroker"

#: Runs a test's command so that it dies with the test run: PR_SET_PDEATHSIG (kept across
#: exec) sends it SIGKILL when the pytest thread that started it ends, so a pytest killed
#: from outside leaves no ``zbroker`` behind (its finalizers, which stop each by PID, do
#: not run then). A launcher, not ``preexec_fn``: that is unsafe in a process with threads.
_DIE_WITH_PARENT = """
import ctypes, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(1, signal.SIGKILL) != 0:  # PR_SET_PDEATHSIG
    sys.exit(f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}")
if os.getppid() != int(sys.argv[1]):  # the parent died before the prctl
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _dying_with_us(args: Sequence[str]) -> list[str]:
    if not sys.platform.startswith("linux"):
        return list(args)
    return [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *args]


class Proc:
    """A subprocess with its stdout and stderr read line by line on background threads."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        env: dict[str, str],
        cwd: Path,
        stdin: int | None = subprocess.DEVNULL,
    ) -> None:
        self.args = list(args)
        self.popen = subprocess.Popen(
            _dying_with_us(self.args),
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            text=True,
            encoding="utf-8",
            errors="replace",
            # its own session: a Ctrl-C at the terminal running pytest does not reach it
            start_new_session=True,
        )
        self.pid = self.popen.pid
        self.stdout_lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._out: list[str] = []
        self._err: list[str] = []
        self._err_cond = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(self.popen.stdout, True), daemon=True),
            threading.Thread(target=self._read, args=(self.popen.stderr, False), daemon=True),
        ]
        for t in self._readers:
            t.start()

    def _read(self, stream: Any, is_stdout: bool) -> None:
        try:
            for line in stream:
                if is_stdout:
                    self._out.append(line)
                    self.stdout_lines.put(line)
                else:
                    with self._err_cond:
                        self._err.append(line)
                        self._err_cond.notify_all()
        except (OSError, ValueError):
            pass
        finally:
            with self._err_cond:
                self._err_cond.notify_all()

    def describe(self) -> str:
        return f"process {self.pid} ({' '.join(self.args[1:4])} ...)"

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float) -> int:
        """Wait (bounded) for the process to exit; raises subprocess.TimeoutExpired."""
        rc = self.popen.wait(timeout)
        self._join_readers(5.0)
        return rc

    def send_signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def readline(self, timeout: float) -> str | None:
        """The next stdout line, or None if none arrives within ``timeout``."""
        try:
            return self.stdout_lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait_stderr(self, needle: str, timeout: float) -> bool:
        """Wait until ``needle`` appears on stderr; False on timeout or exit without it."""
        deadline = time.monotonic() + timeout
        with self._err_cond:
            while True:
                if needle in "".join(self._err):
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or (
                    self.popen.poll() is not None and not any(t.is_alive() for t in self._readers)
                ):
                    return False
                self._err_cond.wait(min(left, 0.1))

    def stdout_text(self) -> str:
        return "".join(self._out)

    def stderr_text(self) -> str:
        with self._err_cond:
            return "".join(self._err)

    def _join_readers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for t in self._readers:
            t.join(max(0.0, deadline - time.monotonic()))

    def stop(self, timeout: float = 5.0) -> int | None:
        """Stop the process by PID: SIGTERM, wait up to ``timeout``, then SIGKILL."""
        if self.popen.poll() is None:
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()  # SIGKILL to this PID
                try:
                    self.popen.wait(timeout)
                except subprocess.TimeoutExpired:
                    pass
            except ProcessLookupError:
                pass
        if self.popen.stdin is not None:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        self._join_readers(2.0)
        return self.popen.returncode


def subprocess_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for a subprocess: no inherited ZBROKER_* settings, a private
    XDG_DATA_HOME (so no default data directory lands in the real home), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZBROKER_")}
    env["ZBROKER_DISCOVERY"] = "false"  # network safety: no mDNS in the root namespace
    xdg = tmp_path / "xdg-data"
    xdg.mkdir(parents=True, exist_ok=True)
    env["XDG_DATA_HOME"] = str(xdg)
    env.update(extra)
    return env


class Procs:
    """Starts subprocesses for one test and stops every one of them by PID afterwards."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[Proc] = []

    def env(self, **extra: str) -> dict[str, str]:
        """The default subprocess environment (see :func:`subprocess_env`) plus ``extra``."""
        return subprocess_env(self.tmp_path, **extra)

    def start(
        self,
        args: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
    ) -> Proc:
        proc = Proc(
            args,
            env=env if env is not None else subprocess_env(self.tmp_path),
            cwd=self.tmp_path,
            stdin=stdin,
        )
        self.started.append(proc)
        return proc

    def zbroker(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        stdin: int | None = subprocess.DEVNULL,
    ) -> Proc:
        """Start the ``zbroker`` console script with ``args``."""
        return self.start([str(ZBROKER_SCRIPT), *args], env=env, stdin=stdin)

    def python_m(self, *args: str, env: dict[str, str] | None = None) -> Proc:
        """Start ``python -m zbroker`` with ``args``."""
        return self.start([sys.executable, "-m", "zbroker", *args], env=env)

    def run(
        self,
        *args: str,
        timeout: float = 30.0,
        env: dict[str, str] | None = None,
        input: str | None = None,
    ) -> tuple[int, str, str]:
        """Run the ``zbroker`` console script to completion (bounded); (rc, stdout, stderr)."""
        proc = self.zbroker(
            *args, env=env, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL
        )
        if input is not None:
            assert proc.popen.stdin is not None
            proc.popen.stdin.write(input)
            proc.popen.stdin.close()
        rc = proc.wait(timeout)
        return rc, proc.stdout_text(), proc.stderr_text()

    def stop_all(self) -> None:
        for proc in reversed(self.started):
            proc.stop()
