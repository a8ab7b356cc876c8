"""The netns LAN harness of the LAN discovery tests (``test_*netns*.py``): three Linux
network namespaces joined by a bridge, ``zbroker start`` processes and helper clients run
inside them, and the guard that checks nothing of ours reached the machine's own eth0.

NETWORK SAFETY: mDNS runs only inside the namespaces this harness creates (addresses in
198.18.0.0/24 and fd5a:6272:6f6b::/64), never in the machine's own namespace and never on
eth0. Every process that runs zbroker goes through ``ip netns exec``; the guard
(``eth0_guard``, a tcpdump on eth0 for a whole test module) checks that nothing of ours
reached eth0: in the module's ``test_no_mdns_or_test_traffic_on_eth0`` (its last test), or
at the module's end if it has none.

Topology (created per test, deleted afterwards, names ``zb<pid>br`` and ``zb<pid>1..3``)::

    ns1 (198.18.0.1, fd5a:6272:6f6b::1) --veth-- |
    ns2 (198.18.0.2, fd5a:6272:6f6b::2) --veth-- | br0 in ns "br"
    ns3 (198.18.0.3, fd5a:6272:6f6b::3) --veth-- |

A test module calls :func:`require_netns` first (it skips the module where namespaces
cannot be made) and imports the fixtures it uses (``net``, ``group``, ``eth0_guard``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


def require_netns() -> None:
    """Skip the calling test module unless this machine can make network namespaces."""
    if sys.platform != "linux":
        pytest.skip("network namespaces need Linux", allow_module_level=True)
    if os.geteuid() != 0:
        pytest.skip(
            "needs root: creates network namespaces (ip netns add)", allow_module_level=True
        )
    if shutil.which("ip") is None:
        pytest.skip("`ip` (iproute2) is not installed: no `ip netns`", allow_module_level=True)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10, check=False)
    if listed.returncode != 0:
        pytest.skip("`ip netns` is unavailable on this machine", allow_module_level=True)


ZBROKER = str(Path(sys.executable).parent / "zbroker")
HELPER = str(Path(__file__).parent / "netns_helpers" / "nsclient.py")
PORT = 7100
WAIT = 25.0  # seconds: upper bound of any condition wait (not a sleep)
HEARTBEAT_TIMEOUT = 3.0  # the default link heartbeat timeout (zbroker.const)
V6 = "fd5a:6272:6f6b::"
TCPDUMP_ERR = Path(f"/tmp/zbroker-netns-tcpdump-{os.getpid()}.err")
_NS_NAME = re.compile(r"^zb(\d+)(br|1|2|3)$")


def v4(i: int) -> str:
    return f"198.18.0.{i}"


def endpoint(host: str, port: int = PORT) -> str:
    return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"


# -- namespaces ---------------------------------------------------------------------------


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20, check=check)


def _live_prefixes() -> set[int]:
    """pid % 100000 of every live process: the prefixes a running test module may use."""
    return {int(p) % 100_000 for p in os.listdir("/proc") if p.isdigit()}


def _delete_stale(mine: str) -> None:
    """Delete namespaces of this naming scheme left by crashed runs: those with our own
    prefix, and those whose prefix belongs to no live process (never a running module's)."""
    live = _live_prefixes()
    for line in _ip("netns", "list").stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = _NS_NAME.match(name)
        if not m:
            continue
        if f"zb{m.group(1)}" == mine or int(m.group(1)) not in live:
            _ip("netns", "del", name, check=False)


class Net:
    """Three namespaces on one bridge, and the processes started in them."""

    def __init__(self, prefix: str, procs: Any, tmp_path: Path) -> None:
        self.prefix = prefix
        self.procs = procs
        self.tmp_path = tmp_path
        self.created: list[str] = []
        self.helpers: list[Helper] = []

    def ns(self, i: int) -> str:
        return f"{self.prefix}{i}"

    def setup(self) -> None:
        p = self.prefix
        br = f"{p}br"
        _ip("netns", "add", br)
        self.created.append(br)
        _ip("-n", br, "link", "add", "br0", "type", "bridge")
        _ip("-n", br, "link", "set", "br0", "up")
        _ip("-n", br, "link", "set", "lo", "up")
        for i in (1, 2, 3):
            ns = self.ns(i)
            _ip("netns", "add", ns)
            self.created.append(ns)
            _ip("-n", br, "link", "add", f"p{i}", "type", "veth",
                "peer", "name", "zb0", "netns", ns)  # fmt: skip
            _ip("-n", br, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", br, "link", "set", f"p{i}", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{v4(i)}/24", "dev", "zb0")
            _ip("-n", ns, "addr", "add", f"{V6}{i}/64", "dev", "zb0", "nodad")
            _ip("-n", ns, "link", "set", "zb0", "multicast", "on", "up")

    def teardown(self) -> None:
        """Stop every process (SIGTERM to all, one shared bounded wait, SIGKILL the rest,
        all by PID), then delete the namespaces."""
        started = list(self.procs.started)
        for proc in started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        for proc in started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(max(0.01, deadline - time.monotonic()))
        for proc in started:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.popen.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.popen.wait(5.0)
        self.procs.stop_all()  # joins the output readers; every process is gone by now
        for name in reversed(self.created):
            _ip("netns", "del", name, check=False)
        self.created.clear()

    # -- processes inside the namespaces ------------------------------------------------

    def start(self, i: int, *args: str, **env: str) -> Any:
        """Start ``args`` inside namespace i (Popen.pid is the process itself)."""
        argv = ["ip", "netns", "exec", self.ns(i), *args]
        return self.procs.start(argv, env=self.procs.env(**env))

    def start_node(
        self,
        i: int,
        node_id: str,
        group: str,
        *,
        host: str | None = None,
        port: int = PORT,
        interfaces: tuple[str, ...] = (),
        log_level: str = "info",
        extra: tuple[str, ...] = (),
    ) -> Any:
        args = [
            ZBROKER, "start",
            "--host", host or v4(i),
            "--port", str(port),
            "--id", node_id,
            "--data-dir", str(self.tmp_path / f"data-{node_id}"),
            "--discovery",
            "--group", group,
            "--log-level", log_level,
        ]  # fmt: skip
        for addr in interfaces:
            args += ["--interface", addr]
        return self.start(i, *args, *extra, ZBROKER_DISCOVERY="true")

    def helper(self, i: int, mode: str, *args: str) -> Helper:
        h = Helper(self.start(i, sys.executable, HELPER, mode, *args))
        self.helpers.append(h)
        return h

    def cli(self, i: int, *args: str, input: str | None = None, timeout: float = 20.0) -> Any:
        """Run ``zbroker ARGS`` inside namespace i; the parsed JSON of stdout, or None when
        the command fails (node not up yet, ...)."""
        res = subprocess.run(
            ["ip", "netns", "exec", self.ns(i), ZBROKER, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.procs.env(),
            check=False,
        )
        if res.returncode != 0:
            return None
        try:
            return json.loads(res.stdout) if res.stdout.strip() else {}
        except ValueError:
            return None

    def run(self, i: int, *args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``zbroker ARGS`` inside namespace i to its end (60 s at most)."""
        return subprocess.run(
            ["ip", "netns", "exec", self.ns(i), ZBROKER, *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            env=self.procs.env(),
            check=False,
        )

    def peers(self, i: int, ep: str) -> Any:
        return self.cli(i, "peers", "--json", "--broker", ep, "--timeout", "3")

    def status(self, i: int, ep: str) -> Any:
        return self.cli(i, "status", "--json", "--broker", ep, "--timeout", "3")


class Helper:
    """A nsclient.py process and the JSON events it has printed so far."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []

    def drain(self) -> list[dict[str, Any]]:
        while True:
            line = self.proc.readline(0)
            if line is None:
                return self.events
            with contextlib.suppress(ValueError):
                self.events.append(json.loads(line))

    def wait_for(
        self, pred: Callable[[dict[str, Any]], bool], timeout: float = WAIT, start: int = 0
    ) -> dict[str, Any]:
        """The first event (from index ``start``) matching ``pred``; fails after timeout."""
        deadline = time.monotonic() + timeout
        while True:
            for ev in self.drain()[start:]:
                if pred(ev):
                    return ev
            if self.proc.poll() is not None:
                self.drain()
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                pytest.fail(
                    f"helper exited ({self.proc.returncode}) without the awaited event; "
                    f"events {self.events[-5:]!r}; stderr {self.proc.stderr_text()[-2000:]!r}"
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"no awaited event within {timeout:g} s; last events {self.events[-5:]!r}; "
                    f"stderr {self.proc.stderr_text()[-2000:]!r}"
                )
            line = self.proc.readline(0.05)
            if line is not None:
                with contextlib.suppress(ValueError):
                    self.events.append(json.loads(line))

    def msgs(self, topic_prefix: str = "") -> list[dict[str, Any]]:
        return [
            e
            for e in self.drain()
            if e.get("event") == "msg" and e.get("topic", "").startswith(topic_prefix)
        ]

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM by PID and wait for a clean exit (fails the test if it hangs)."""
        self.proc.send_signal(signal.SIGTERM)
        rc: int | None = self.proc.wait(timeout)
        self.drain()
        return rc


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def eth0_guard() -> Iterator[dict[str, Any]]:
    """tcpdump on eth0 for the whole module: mDNS or test-subnet packets must never appear
    there. One capture (bounded by ``timeout``), stopped by PID at the end of the module."""
    state: dict[str, Any] = {"proc": None, "skip": None, "stderr": "", "checked": False}
    if shutil.which("tcpdump") is None:
        state["skip"] = "tcpdump is not installed (apt-get install tcpdump)"
    elif not Path("/sys/class/net/eth0").exists():
        state["skip"] = "this machine has no eth0"
    if state["skip"]:
        yield state
        return
    err_path = TCPDUMP_ERR
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            ["timeout", "900", "tcpdump", "-ni", "eth0", "-c", "1", "-l",
             "udp port 5353 or net 198.18.0.0/24"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )  # fmt: skip
    state["proc"] = proc
    try:
        deadline = time.monotonic() + 10.0
        while "listening on" not in err_path.read_text() and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.02)
        if "listening on" not in err_path.read_text():
            state["skip"] = f"tcpdump did not start on eth0: {err_path.read_text()[-500:]!r}"
        yield state
        if not state["skip"] and not state["checked"]:
            assert_eth0_clean(state)  # (a module without a test of its own for it)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # `timeout` passes it on to tcpdump
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        err_path.unlink(missing_ok=True)


@pytest.fixture
def net(procs: Any, tmp_path: Path) -> Iterator[Net]:
    """Fresh namespaces for one test; its processes are stopped and the namespaces deleted
    at teardown, also when the test fails."""
    prefix = f"zb{os.getpid() % 100_000}"
    _delete_stale(prefix)
    n = Net(prefix, procs, tmp_path)
    try:
        n.setup()
        yield n
    finally:
        n.teardown()


@pytest.fixture
def group(request: pytest.FixtureRequest) -> str:
    """A group name unique to this test and run."""
    name = request.node.name.removeprefix("test_")[:40]
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"{name}-{os.getpid()}")


def assert_eth0_clean(guard: dict[str, Any]) -> None:
    """The module's capture on eth0 saw no packet (mDNS or 198.18.0.0/24); stops it."""
    guard["checked"] = True
    proc = guard["proc"]
    # `-c 1`: tcpdump exits by itself after the first matching packet
    assert proc.poll() is None, "tcpdump captured a packet on eth0 (mDNS or 198.18.0.0/24)"
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    err = TCPDUMP_ERR.read_text()
    m = re.search(r"(\d+) packets? captured", err)
    assert m is not None, err
    assert int(m.group(1)) == 0, err
