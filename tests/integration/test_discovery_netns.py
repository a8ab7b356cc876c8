"""LAN discovery (mDNS) end to end, between real ``zbroker start`` processes in Linux
network namespaces joined by a bridge.

NETWORK SAFETY: mDNS runs only inside the namespaces this module creates (addresses in
198.18.0.0/24 and fd5a:6272:6f6b::/64), never in the machine's own namespace and never on
eth0. Every process that runs zbroker goes through ``ip netns exec``; the guard at the end
of the module checks with tcpdump that nothing of ours reached eth0.

Topology (created per test, deleted afterwards, names ``zb<pid>br`` and ``zb<pid>1..3``)::

    ns1 (198.18.0.1, fd5a:6272:6f6b::1) --veth-- |
    ns2 (198.18.0.2, fd5a:6272:6f6b::2) --veth-- | br0 in ns "br"
    ns3 (198.18.0.3, fd5a:6272:6f6b::3) --veth-- |

Nodes are inspected with ``zbroker peers --json`` / ``zbroker status --json`` run inside
the namespaces; timings come from ``netns_helpers/nsclient.py monitor`` (a client polling
the node every 50 ms and printing each change with ``time.time()``). Waits are bounded
polls on conditions, never fixed sleeps. Measured figures go to
``/tmp/zbroker_netns_figures.json`` (and are printed: run with ``-s``).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

if sys.platform != "linux":
    pytest.skip("network namespaces need Linux", allow_module_level=True)
if os.geteuid() != 0:
    pytest.skip("needs root: creates network namespaces (ip netns add)", allow_module_level=True)
if shutil.which("ip") is None:
    pytest.skip("`ip` (iproute2) is not installed: no `ip netns`", allow_module_level=True)
if (
    subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10, check=False).returncode
    != 0
):
    pytest.skip("`ip netns` is unavailable on this machine", allow_module_level=True)

pytestmark = pytest.mark.slow

ZBROKER = str(Path(sys.executable).parent / "zbroker")
HELPER = str(Path(__file__).parent / "netns_helpers" / "nsclient.py")
FIGURES_FILE = Path("/tmp/zbroker_netns_figures.json")
PORT = 7100
WAIT = 25.0  # seconds: upper bound of any condition wait (not a sleep)
HEARTBEAT_TIMEOUT = 3.0  # the default link heartbeat timeout (zbroker.const)
V6 = "fd5a:6272:6f6b::"
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
        rc = self.proc.wait(timeout)
        self.drain()
        return rc


# -- fixtures -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def figures() -> Iterator[dict[str, Any]]:
    """Measured figures of this module; written to FIGURES_FILE and printed at the end."""
    data: dict[str, Any] = {}
    yield data
    if data:
        out = {
            "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "setup": "zbroker start processes in 3 Linux network namespaces on one bridge "
            "(veth), default link heartbeats (1 s / 3 s), default client heartbeats "
            "(0.5 s / 1.5 s)",
            **data,
        }
        FIGURES_FILE.write_text(json.dumps(out, indent=2) + "\n", "utf-8")
        print(f"\nzbroker netns figures ({FIGURES_FILE}):\n{json.dumps(out, indent=2)}")


@pytest.fixture(scope="module", autouse=True)
def eth0_guard() -> Iterator[dict[str, Any]]:
    """tcpdump on eth0 for the whole module: mDNS or test-subnet packets must never appear
    there. One capture (bounded by ``timeout``), stopped by PID at the end of the module."""
    state: dict[str, Any] = {"proc": None, "skip": None, "stderr": ""}
    if shutil.which("tcpdump") is None:
        state["skip"] = "tcpdump is not installed (apt-get install tcpdump)"
    elif not Path("/sys/class/net/eth0").exists():
        state["skip"] = "this machine has no eth0"
    if state["skip"]:
        yield state
        return
    err_path = Path(f"/tmp/zbroker-netns-tcpdump-{os.getpid()}.err")
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


# -- helpers ------------------------------------------------------------------------------


def expected_mesh(nodes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """What ``peers`` and ``status`` of each node must show once the nodes ({id: endpoint},
    one group) have found each other: one link per pair, dialled by the lower ID."""
    out: dict[str, dict[str, Any]] = {}
    for a in nodes:
        peers: dict[str, Any] = {}
        links: list[tuple[str, str, str, str]] = []
        for b in nodes:
            if a == b:
                continue
            if a < b:
                peers[b] = (("mdns",), "up", nodes[b], (f"mdns-{b}",))
                links.append((f"mdns-{b}", "discovered", b, "up"))
            else:
                peers[b] = (("inbound", "mdns"), "up", nodes[b], (f"mdns-{a}",))
                links.append((f"mdns-{a}", "accepted", b, "up"))
        out[a] = {"peers": peers, "links": sorted(links)}
    return out


def view_of(peers: Any, status: Any) -> dict[str, Any] | None:
    if peers is None or status is None:
        return None
    return {
        "peers": {
            p["id"]: (tuple(p["found_by"]), p["state"], p["endpoint"], tuple(p["links"]))
            for p in peers
        },
        "links": sorted(
            (ln["name"], ln["kind"], ln["peer"], ln["state"]) for ln in status["links"]
        ),
    }


def poll_views(net: Net, where: dict[str, tuple[int, str]]) -> dict[str, Any]:
    """peers + status of every node ({id: (namespace index, endpoint)}), concurrently."""

    def one(job: tuple[str, str]) -> Any:
        node_id, what = job
        i, ep = where[node_id]
        return net.peers(i, ep) if what == "peers" else net.status(i, ep)

    jobs = [(node_id, what) for node_id in where for what in ("peers", "status")]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = dict(zip(jobs, pool.map(one, jobs), strict=True))
    return {node_id: (results[node_id, "peers"], results[node_id, "status"]) for node_id in where}


def wait_mesh(net: Net, where: dict[str, tuple[int, str]], timeout: float = WAIT) -> dict[str, Any]:
    """Poll until every node's peers and links are exactly the expected full mesh; assert
    equality (with the last views in the message) when the time is up. Returns the raw
    (peers, status) per node."""
    expected = expected_mesh({k: ep for k, (_, ep) in where.items()})
    deadline = time.monotonic() + timeout
    while True:
        raw = poll_views(net, where)
        views = {k: view_of(*v) for k, v in raw.items()}
        if views == expected or time.monotonic() > deadline:
            break
        time.sleep(0.1)  # pacing of the poll only
    assert views == expected
    return raw


def log_time(line: str) -> float:
    """The epoch time of a log line from ``zbroker start`` (asctime, local time, ms)."""
    stamp = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


def wait_gone(monitors: dict[str, Helper], peer: str, since: int = 0) -> dict[str, float]:
    """Wait until ``peer`` is in none of the monitored nodes' peers (nor their links);
    the time each one first showed that."""
    out: dict[str, float] = {}
    for node_id, mon in monitors.items():
        ev = mon.wait_for(
            lambda e: (
                e.get("event") == "view"
                and peer not in e["peers"]
                and all(ln[2] != peer for ln in e["links"])
            ),
            start=since,
        )
        out[node_id] = ev["t"]
    return out


def start_mesh(net: Net, group: str, n: int = 3) -> dict[str, tuple[int, str]]:
    for i in range(1, n + 1):
        net.start_node(i, f"n{i}", group)
    return {f"n{i}": (i, endpoint(v4(i))) for i in range(1, n + 1)}


def start_monitors(
    net: Net, where: dict[str, tuple[int, str]], watch: tuple[str, ...]
) -> dict[str, Helper]:
    """Monitors on the nodes ``watch``, each once it shows every other node of ``where``
    as a peer with its link up."""
    mons = {
        node_id: net.helper(where[node_id][0], "monitor", "--broker", where[node_id][1])
        for node_id in watch
    }
    for node_id, mon in mons.items():
        others = set(where) - {node_id}
        mon.wait_for(
            lambda e, o=others: (
                e.get("event") == "view"
                and set(e["peers"]) == o
                and all(p["state"] == "up" for p in e["peers"].values())
            )
        )
    return mons


@contextlib.contextmanager
def precondition(what: str) -> Iterator[None]:
    """In an xfail(raises=AssertionError) test: a failing precondition is a real failure,
    not the expected one."""
    try:
        yield
    except AssertionError as exc:
        pytest.fail(f"precondition failed ({what}): {exc}")


# -- tests ----------------------------------------------------------------------------------


def test_three_nodes_discover_each_other_one_link_per_pair(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    t0 = time.time()
    where = start_mesh(net, group)
    raw = wait_mesh(net, where)
    for node_id, (peers, status) in raw.items():
        assert all("mdns" in p["found_by"] for p in peers), (node_id, peers)
        kinds = sorted(ln["kind"] for ln in status["links"])
        assert set(kinds) <= {"discovered", "accepted"}
        # exactly one link came up on each node per peer, and none went down since
        assert status["counters"]["links_up"] == 2, (node_id, status["counters"])
        assert status["counters"]["links_down"] == 0, (node_id, status["counters"])
        assert status["counters"]["handshakes_refused"] == 0, (node_id, status["counters"])
        assert status["discovery"]["error"] is None
        assert status["discovery"]["interfaces"] == [v4(where[node_id][0])]
    all_links = [ln for _, st in raw.values() for ln in st["links"]]
    assert sum(ln["kind"] == "discovered" for ln in all_links) == 3
    assert sum(ln["kind"] == "accepted" for ln in all_links) == 3
    dialled = sorted(
        (node_id, ln["peer"])
        for node_id, (_, st) in raw.items()
        for ln in st["links"]
        if ln["kind"] == "discovered"
    )
    assert dialled == [("n1", "n2"), ("n1", "n3"), ("n2", "n3")]
    # figure: start of the first node to the last link up (from the nodes' own logs)
    ups = [
        log_time(line)
        for proc in net.procs.started[:3]
        for line in proc.stderr_text().splitlines()
        if re.search(r" INFO zbroker\.node: link \S+ (to|from) \S+ .* is up$", line)
    ]
    assert len(ups) == 6
    figures["mesh_3_nodes_all_links_up_s"] = round(max(ups) - t0, 3)


def test_message_from_ns1_reaches_subscriber_in_ns3_exactly_once(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    n = 500
    net.start_node(1, "n1", group)
    net.start_node(2, "n2", group)
    where12 = {"n1": (1, endpoint(v4(1))), "n2": (2, endpoint(v4(2)))}
    wait_mesh(net, where12)
    warm = net.helper(1, "pub", "--broker", endpoint(v4(1)), "--topic", "WARM.tick",
                      "--interval", "0.01")  # fmt: skip
    warm.wait_for(lambda e: e.get("event") == "publishing")
    # the third node and a subscriber on it, both in ns3
    t_start = time.time()
    net.start_node(3, "n3", group)
    sub = net.helper(3, "sub", "--broker", endpoint(v4(3)), "--pattern", "DATA.>",
                     "--pattern", "WARM.>")  # fmt: skip
    first = sub.wait_for(lambda e: e.get("event") == "msg" and e["topic"] == "WARM.tick")
    assert first["origin"] == "n1" and first["via"] == "n3"
    figures["third_node_start_to_first_delivery_from_ns1_s"] = round(first["t"] - t_start, 3)
    warm.stop()
    where = {**where12, "n3": (3, endpoint(v4(3)))}
    wait_mesh(net, where)
    # n1 knows n3's interest in DATA.> (the subscription is confirmed, the advert is in)
    deadline = time.monotonic() + WAIT
    while True:
        routes = net.cli(1, "routes", "DATA.x", "--json", "--broker", endpoint(v4(1))) or []
        if any(r["origin"] == "n3" for r in routes) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert any(r["origin"] == "n3" for r in routes), routes
    lines = "".join(f"{k}\n" for k in range(n)) + "END\n"
    res = subprocess.run(
        ["ip", "netns", "exec", net.ns(1), ZBROKER, "pub", "DATA.x", "-",
         "--broker", endpoint(v4(1))],
        input=lines, capture_output=True, text=True, timeout=60, env=net.procs.env(), check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"published {n + 1} message(s)" in res.stderr
    sub.wait_for(lambda e: e.get("event") == "msg" and e["payload"] == "END")
    data = [e for e in sub.msgs("DATA.") if e["payload"] != "END"]
    payloads = [e["payload"] for e in data]
    assert len(payloads) == n, f"{len(payloads)} delivered, expected {n}"
    assert sorted(payloads, key=int) == [str(k) for k in range(n)]  # each exactly once
    assert payloads == [str(k) for k in range(n)]  # in order (one origin, one path)
    assert {e["origin"] for e in data} == {"n1"} and {e["via"] for e in data} == {"n3"}
    assert len({e["seq"] for e in data}) == n
    st3 = net.status(3, endpoint(v4(3)))
    assert st3["counters"]["delivered"] >= n + 1


def test_sigterm_node_leaves_others_peers_promptly(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    where = start_mesh(net, group)
    wait_mesh(net, where)
    mons = start_monitors(net, where, ("n1", "n2"))
    marks = {k: len(m.drain()) for k, m in mons.items()}
    node3 = net.procs.started[2]
    t_term = time.time()
    node3.send_signal(signal.SIGTERM)
    gone = {k: wait_gone({k: m}, "n3", since=marks[k])[k] for k, m in mons.items()}
    took = {k: round(t - t_term, 3) for k, t in gone.items()}
    figures["sigterm_to_removal_everywhere_s"] = max(took.values())
    assert max(took.values()) <= 2.0, took
    for node_id in ("n1", "n2"):
        i, ep = where[node_id]
        view = view_of(net.peers(i, ep), net.status(i, ep))
        assert view is not None
        assert set(view["peers"]) == {"n1", "n2"} - {node_id}
        assert [ln[2] for ln in view["links"]] == list({"n1", "n2"} - {node_id})


def test_sigterm_node_process_exits(net: Net, group: str) -> None:
    node = net.start_node(1, "n1", group)
    with precondition("node up with discovery"):
        assert node.wait_stderr("announced n1", WAIT), node.stderr_text()
        assert net.status(1, endpoint(v4(1))) is not None
    node.send_signal(signal.SIGTERM)
    try:
        rc = node.wait(8.0)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"node still running 8 s after SIGTERM; stderr tail: {node.stderr_text()[-600:]!r}"
        ) from None
    assert rc == 0


def test_sigkill_node_dropped_after_heartbeat_timeout(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    where = start_mesh(net, group)
    wait_mesh(net, where)
    mons = start_monitors(net, where, ("n1", "n2"))
    marks = {k: len(m.drain()) for k, m in mons.items()}
    node3 = net.procs.started[2]
    t_kill = time.time()
    node3.popen.kill()  # SIGKILL, by PID
    node3.wait(5)
    gone = {k: wait_gone({k: m}, "n3", since=marks[k])[k] for k, m in mons.items()}
    took = {k: round(t - t_kill, 3) for k, t in gone.items()}
    figures["sigkill_to_removal_everywhere_s"] = max(took.values())
    figures["sigkill_to_removal_per_node_s"] = took
    # no goodbye: only the link heartbeat notices (3 s); never earlier, at most 1.5 s later
    # (the last heartbeat from n3 arrived up to one interval, 1 s, before the kill)
    assert min(took.values()) >= HEARTBEAT_TIMEOUT - 1.0 - 0.1, took
    assert max(took.values()) <= HEARTBEAT_TIMEOUT + 1.5, took
    # n1 and n2 keep their own link
    wait_mesh(net, {k: where[k] for k in ("n1", "n2")})


def test_sigkill_node_rejoins_after_restart(net: Net, group: str) -> None:
    where = start_mesh(net, group)
    with precondition("mesh up, then n3 killed and dropped"):
        wait_mesh(net, where)
        mons = start_monitors(net, where, ("n1", "n2"))
        marks = {k: len(m.drain()) for k, m in mons.items()}
        node3 = net.procs.started[2]
        node3.popen.kill()  # SIGKILL, by PID
        node3.wait(5)
        for k, m in mons.items():
            wait_gone({k: m}, "n3", since=marks[k])
        again = net.start_node(3, "n3", group)
        assert again.wait_stderr("announced n3", WAIT), again.stderr_text()
        # the same data directory: a strictly larger incarnation (it follows the clock)
        assert incarnation(again.stderr_text()) > incarnation(node3.stderr_text())
    # links up again: the full mesh as before the crash (bounded: 20 s after the announce)
    wait_mesh(net, where, timeout=20.0)


def incarnation(stderr: str) -> int:
    """The incarnation a node's start line names ("node n3 (incarnation N, ...")."""
    found = re.search(r"node \S+ \(incarnation (\d+)", stderr)
    assert found is not None, stderr
    return int(found.group(1))


def test_nodes_of_another_group_do_not_join(net: Net, group: str) -> None:
    other = f"x-{group}"[:60]
    nodes = [net.start_node(i, f"n{i}", group, log_level="debug") for i in (1, 2, 3)]
    where = {f"n{i}": (i, endpoint(v4(i))) for i in (1, 2, 3)}
    stranger = net.start_node(3, "x4", other, port=7200, log_level="debug")
    ep4 = endpoint(v4(3), 7200)
    # positive evidence that each side found the other and filtered it out by group
    for node_id in ("n1", "n2", "n3"):
        assert stranger.wait_stderr(f"ignoring node {node_id} of group {group!r}", WAIT), (
            stranger.stderr_text()[-3000:]
        )
    for proc in nodes:
        assert proc.wait_stderr(f"ignoring node x4 of group {other!r}", WAIT)
    raw = wait_mesh(net, where)
    for node_id, (peers, status) in raw.items():
        assert "x4" not in {p["id"] for p in peers}, node_id
        assert status["counters"]["handshakes_refused"] == 0
    assert net.peers(3, ep4) == []
    st4 = net.status(3, ep4)
    assert st4["group"] == other
    assert st4["links"] == []
    assert st4["discovery"]["peers"] == 0
    assert st4["counters"]["links_up"] == 0 and st4["counters"]["handshakes_refused"] == 0


def test_zeroconf_client_fails_over_on_sigkill(
    net: Net, group: str, figures: dict[str, Any]
) -> None:
    # n1 alone first, so the client (which takes whichever node it finds first) is on n1
    node1 = net.start_node(1, "n1", group)
    assert node1.wait_stderr("announced n1", WAIT), node1.stderr_text()
    sub = net.helper(2, "sub", "--broker", f"zeroconf://{group}", "--interface", v4(2),
                     "--want", "n1", "--pattern", "FO.>", "--report-candidates")  # fmt: skip
    sub.wait_for(lambda e: e.get("event") == "subscribed" and e["broker"] == "n1")
    net.start_node(2, "n2", group)
    net.start_node(3, "n3", group)
    where = {f"n{i}": (i, endpoint(v4(i))) for i in (1, 2, 3)}
    wait_mesh(net, where)
    # the client has found the two others on the LAN by now
    sub.wait_for(
        lambda e: (
            e.get("event") == "candidates"
            and sorted(e["endpoints"]) == sorted(ep for _, ep in where.values())
        )
    )
    pub = net.helper(3, "pub", "--broker", endpoint(v4(3)), "--topic", "FO.tick",
                     "--interval", "0.01")  # fmt: skip
    sub.wait_for(lambda e: e.get("event") == "msg" and e["via"] == "n1")
    mark = len(sub.drain())
    t_kill = time.time()
    node1.popen.kill()  # SIGKILL, by PID
    node1.wait(5)
    after = sub.wait_for(lambda e: e.get("event") == "msg" and e["via"] != "n1", start=mark)
    failover = round(after["t"] - t_kill, 3)
    figures["client_failover_sigkill_to_first_message_s"] = failover
    assert after["via"] in ("n2", "n3")
    assert failover <= 3.0, failover
    # it keeps receiving: 100 more messages through the new node, then the end marker
    i0 = after["payload"]["i"]
    sub.wait_for(
        lambda e: e.get("event") == "msg" and e["via"] != "n1" and e["payload"]["i"] >= i0 + 100
    )
    pub.stop()
    done = pub.wait_for(lambda e: e.get("event") == "done")
    sub.wait_for(lambda e: e.get("event") == "msg" and e["payload"]["i"] == -1)
    got = [e["payload"]["i"] for e in sub.msgs("FO.") if e["payload"]["i"] >= 0]
    assert len(got) == len(set(got)), "duplicate deliveries"
    tail = sorted(i for i in got if i >= i0)
    # every message published after the failover arrived, exactly once
    assert tail == list(range(i0, done["last"] + 1)), (i0, done["last"], len(tail))
    assert {e["via"] for e in sub.msgs("FO.") if e["payload"]["i"] >= i0} == {after["via"]}
    sub.stop()


def test_unjoinable_interface_logs_one_error_and_keeps_running(net: Net, group: str) -> None:
    node = net.start_node(1, "n1", group, interfaces=("198.18.0.99",))
    assert node.wait_stderr("LAN discovery is off", WAIT), node.stderr_text()
    ep = endpoint(v4(1))
    status = net.status(1, ep)
    assert status is not None and status["broker_id"] == "n1"
    assert "198.18.0.99" in status["discovery"]["error"]
    # publish/subscribe still work on it
    sub = net.helper(1, "sub", "--broker", ep, "--pattern", "T7.>")
    sub.wait_for(lambda e: e.get("event") == "subscribed")
    body = "".join(f"{k}\n" for k in range(10)) + "END\n"
    assert net.cli(1, "pub", "T7.x", "-", "--broker", ep, input=body) == {}
    sub.wait_for(lambda e: e.get("event") == "msg" and e["payload"] == "END")
    assert [e["payload"] for e in sub.msgs("T7.")] == [*(str(k) for k in range(10)), "END"]
    assert node.poll() is None
    assert net.status(1, ep) is not None
    errors = [line for line in node.stderr_text().splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
    assert "discovery" in errors[0] and "198.18.0.99" in errors[0]
    assert "Traceback" not in node.stderr_text()


def test_ipv6_discovery_links(net: Net, group: str) -> None:
    for i in (1, 2):
        net.start_node(i, f"v{i}", group, host="::", interfaces=(f"{V6}{i}",))
    where = {f"v{i}": (i, endpoint(f"{V6}{i}")) for i in (1, 2)}
    raw = wait_mesh(net, where)
    for node_id, (_, status) in raw.items():
        assert status["discovery"]["interfaces"] == [f"{V6}{node_id[1]}"]
        assert status["discovery"]["error"] is None
    (link,) = raw["v1"][1]["links"]
    assert link["uri"] == f"tcp://[{V6}2]:{PORT}"


def test_no_mdns_or_test_traffic_on_eth0(eth0_guard: dict[str, Any]) -> None:
    """Runs last in the module: the capture started before the first test."""
    if eth0_guard["skip"]:
        pytest.skip(eth0_guard["skip"])
    proc = eth0_guard["proc"]
    # `-c 1`: tcpdump exits by itself after the first matching packet
    assert proc.poll() is None, "tcpdump captured a packet on eth0 (mDNS or 198.18.0.0/24)"
    proc.send_signal(signal.SIGTERM)
    proc.wait(10)
    err = Path(f"/tmp/zbroker-netns-tcpdump-{os.getpid()}.err").read_text()
    m = re.search(r"(\d+) packets? captured", err)
    assert m is not None, err
    assert int(m.group(1)) == 0, err


def keygen(*args: str) -> None:
    """``zbroker keygen`` (local files only: no network, so outside the namespaces)."""
    res = subprocess.run([ZBROKER, "keygen", *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr


def test_secure_discovery_links_only_allowlisted_peers(
    net: Net, group: str, tmp_path: Path
) -> None:
    """Security on, discovery on: n1 and n2 allow each other and link over CURVE; n0 (the
    lowest ID, so the dialer of every pair it is in) is in nobody's allowlist: n1 and n2
    never dial it and refuse its handshakes, counting them. A client with keys publishes
    on n1; its messages reach a client with keys on n2, each exactly once."""
    n = 20
    for node_id in ("n0", "n1", "n2"):
        keygen("--data-dir", str(tmp_path / f"data-{node_id}"))
    keygen("--out", str(tmp_path / "keys"), "--name", "alice")
    alice = str(tmp_path / "keys" / "alice.key_secret")
    allow12, allow_all = tmp_path / "allow12", tmp_path / "allow-all"
    for d, ids in ((allow12, ("n1", "n2")), (allow_all, ("n0", "n1", "n2"))):
        d.mkdir()
        for node_id in ids:
            shutil.copy(tmp_path / f"data-{node_id}" / "node.key", d / f"{node_id}.key")
    clients = tmp_path / "clients.toml"
    clients.write_text(
        f'[alice]\nkey_file = "{tmp_path / "keys" / "alice.key"}"\n'
        'publish = ["SEC.>"]\nsubscribe = ["SEC.>"]\nmonitor = true\n'  # (status, routes)
    )
    secure = ("--secure", "--clients", str(clients), "--allowlist")
    net.start_node(1, "n1", group, extra=(*secure, str(allow12)))
    net.start_node(2, "n2", group, extra=(*secure, str(allow12)))
    rogue = net.start_node(3, "n0", group, extra=(*secure, str(allow_all)))
    where = {"n0": 3, "n1": 1, "n2": 2}

    def keyed(node_id: str) -> tuple[str, ...]:
        server_key = str(tmp_path / f"data-{node_id}" / "node.key")
        return ("--keys", alice, "--server-key", server_key)

    def status(node_id: str) -> Any:
        i = where[node_id]
        return net.cli(
            i, "status", "--json", "--broker", endpoint(v4(i)), "--timeout", "3", *keyed(node_id)
        )

    def links_up(st: Any) -> list[str]:
        return sorted(ln["peer"] for ln in st["links"] if ln["state"] == "up")

    deadline = time.monotonic() + WAIT
    while True:
        views = {node_id: status(node_id) for node_id in where}
        done = all(v is not None for v in views.values()) and (
            links_up(views["n1"]) == ["n2"]
            and links_up(views["n2"]) == ["n1"]
            and views["n1"]["counters"]["auth_failures"] >= 1
            and views["n2"]["counters"]["auth_failures"] >= 1
        )
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.2)  # pacing of the poll only
    assert done, views
    assert links_up(views["n0"]) == [], views["n0"]["links"]
    assert views["n0"]["counters"]["links_up"] == 0
    for node_id in ("n1", "n2"):
        st = views[node_id]
        assert st["security"]["enabled"] is True
        assert st["counters"]["links_up"] == 1, (node_id, st["counters"])
        # n0 was seen on the LAN but never dialled: no link toward it exists at all
        assert "n0" not in [ln["peer"] for ln in st["links"]], st["links"]
    (link,) = views["n1"]["links"]
    assert (link["kind"], link["peer"]) == ("discovered", "n2")  # the lower ID dialled
    assert rogue.poll() is None

    sub = net.start(
        2, ZBROKER, "sub", "SEC.>", "--broker", endpoint(v4(2)), "--count", str(n),
        "--json", "--timeout", "10", *keyed("n2"),
    )  # fmt: skip
    assert sub.wait_stderr("subscribed to SEC.>", WAIT), sub.stderr_text()
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        routes = net.cli(
            1, "routes", "SEC.x", "--json", "--broker", endpoint(v4(1)), *keyed("n1")
        ) or []  # fmt: skip
        if any(r["origin"] == "n2" for r in routes):
            break
        time.sleep(0.1)
    assert any(r["origin"] == "n2" for r in routes), routes
    body = "".join(f"{k}\n" for k in range(n))
    res = subprocess.run(
        ["ip", "netns", "exec", net.ns(1), ZBROKER, "pub", "SEC.x", "-",
         "--broker", endpoint(v4(1)), "--timeout", "10", *keyed("n1")],
        input=body, capture_output=True, text=True, timeout=60, env=net.procs.env(), check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert sub.wait(20) == 0, sub.stderr_text()
    lines = [json.loads(x) for x in sub.stdout_text().splitlines() if x.strip()]
    assert [(e["topic"], e["payload"]) for e in lines] == [("SEC.x", str(k)) for k in range(n)]


def test_cli_pub_and_sub_with_zeroconf_broker(net: Net, group: str) -> None:
    """`zbroker sub/pub --broker zeroconf://GROUP` find a node on the LAN by mDNS."""
    n = 5
    net.start_node(1, "n1", group)
    net.start_node(3, "n3", group)
    wait_mesh(net, {"n1": (1, endpoint(v4(1))), "n3": (3, endpoint(v4(3)))})
    sub = net.start(
        3, ZBROKER, "sub", "CLI.>", "--broker", f"zeroconf://{group}", "--interface", v4(3),
        "--count", str(n), "--json", "--timeout", "10",
    )  # fmt: skip
    assert sub.wait_stderr("subscribed to CLI.>", WAIT), sub.stderr_text()
    # the subscription is confirmed on its node; wait until n1 has the interest
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        routes = net.cli(1, "routes", "CLI.x", "--json", "--broker", endpoint(v4(1))) or []
        routes += net.cli(3, "routes", "CLI.x", "--json", "--broker", endpoint(v4(3))) or []
        if len([r for r in routes if r["pattern"] == "CLI.>"]) >= 2:
            break
        time.sleep(0.1)
    res = subprocess.run(
        ["ip", "netns", "exec", net.ns(1), ZBROKER, "pub", "CLI.x", "hello", "--count", str(n),
         "--broker", f"zeroconf://{group}", "--interface", v4(1), "--timeout", "10"],
        capture_output=True, text=True, timeout=60, env=net.procs.env(), check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert sub.wait(20) == 0, sub.stderr_text()
    lines = [json.loads(x) for x in sub.stdout_text().splitlines() if x.strip()]
    assert [(e["topic"], e["payload"]) for e in lines] == [("CLI.x", "hello")] * n
