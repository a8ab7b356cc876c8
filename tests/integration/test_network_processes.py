"""A network of real ``zbroker start`` processes (marked ``slow``): a chain and a ring linked
by ``--peer`` or by ``[[link]]`` tables, a middle process killed and restarted, messages
that come before a link's handshake. Every process is stopped by its PID (``procs``)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.network import (
    HOST,
    WAIT,
    BrokerFactory,
    ClientFactory,
    N,
    WaitUntil,
    assert_exact,
    counters,
    endpoint,
    pump,
)
from tests.node_configs import FAST_LINK
from zbroker import Client
from zbroker.config import LinkConfig
from zbroker.process import (
    DEFAULT_GC_YOUNG_THRESHOLD,
    DEFAULT_MMAP_THRESHOLD,
    DEFAULT_TRIM_THRESHOLD,
)

# -- real processes -------------------------------------------------------------------------------


#: how a node process gets its links: ``zbroker start --peer URI`` (duplex, default
#: options), or ``[[link]]`` tables in a config file (here with short heartbeats)
LINKED_BY = ["peer", "config"]


def start_node(procs: Any, how: str, port: int, data_dir: Path, node_id: str, *peers: int) -> Any:
    """``zbroker start`` as a subprocess, dialling each of ``peers`` (base ports)."""
    args = ["start", "--port", str(port), "--data-dir", str(data_dir), "--id", node_id]
    if how == "peer":
        for p in peers:
            args += ["--peer", endpoint(p)]
    else:
        config = data_dir.with_suffix(".toml")
        config.write_text(
            "".join(
                f'[[link]]\nname = "to-{p}"\nuri = "{endpoint(p)}"\n'
                + "".join(f"{k} = {v}\n" for k, v in FAST_LINK.items())
                for p in peers
            )
        )
        args += ["--config", str(config)]
    # no mDNS discovery: links are exactly the ones given, and nothing leaves 127.0.0.1
    return procs.zbroker(*args, "--log-level", "warning", "--no-discovery")


def client_routes(client: Client) -> set[tuple[str, str]]:
    return {(r["pattern"], r["origin"]) for r in client.routes()}


def client_up_peers(client: Client) -> list[str]:
    return sorted(ln["peer"] for ln in client.status()["links"] if ln["state"] == "up")


@pytest.mark.slow
@pytest.mark.parametrize("how", LINKED_BY)
def test_process_chain(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
    how: str,
) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    nodes = [
        start_node(procs, how, p1, tmp_path / "n1", "N1", p2),
        start_node(procs, how, p2, tmp_path / "n2", "N2", p3),
        start_node(procs, how, p3, tmp_path / "n3", "N3"),
    ]
    for port, proc in zip((p1, p2, p3), nodes, strict=True):
        wait_ready(endpoint(port), WAIT, proc)
    c1, c2, c3 = (client_factory(endpoint(p)) for p in (p1, p2, p3))
    assert wait_until(
        lambda: (
            client_up_peers(c1) == ["N2"]
            and client_up_peers(c2) == ["N1", "N3"]
            and client_up_peers(c3) == ["N2"]
        ),
        WAIT,
    ), [c.status()["links"] for c in (c1, c2, c3)]
    got = Collector()
    c3.subscribe("PCHAIN.>", got)
    assert wait_until(lambda: ("PCHAIN.>", "N3") in client_routes(c1), WAIT), c1.routes()
    pump(c1, "PCHAIN.X", N, got, end="PCHAIN.END")
    assert_exact(got, "PCHAIN.X", range(N), "PCHAIN.END")
    assert c2.status()["counters"]["forwarded"] == N + 1
    for c in (c1, c2, c3):
        status = c.status()
        assert status["counters"]["duplicates"] == 0
        # `zbroker start` owns its process: its collector is tuned (zbroker.process)
        assert status["gc"]["threshold"][0] == DEFAULT_GC_YOUNG_THRESHOLD
        assert status["gc"]["frozen"] > 0
        # and so is its C allocator, on glibc (this machine's and CI's)
        assert status["malloc"] == {
            "tuned": True,
            "mmap_threshold": DEFAULT_MMAP_THRESHOLD,
            "trim_threshold": DEFAULT_TRIM_THRESHOLD,
        }
    for proc in nodes:
        assert proc.poll() is None, proc.stderr_text()


@pytest.mark.slow
@pytest.mark.parametrize("how", LINKED_BY)
def test_process_ring(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
    how: str,
) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    nodes = [
        start_node(procs, how, p1, tmp_path / "n1", "N1", p2),
        start_node(procs, how, p2, tmp_path / "n2", "N2", p3),
        start_node(procs, how, p3, tmp_path / "n3", "N3", p1),
    ]
    for port, proc in zip((p1, p2, p3), nodes, strict=True):
        wait_ready(endpoint(port), WAIT, proc)
    c1, c2, c3 = (client_factory(endpoint(p)) for p in (p1, p2, p3))
    assert wait_until(
        lambda: (
            client_up_peers(c1) == ["N2", "N3"]
            and client_up_peers(c2) == ["N1", "N3"]
            and client_up_peers(c3) == ["N1", "N2"]
        ),
        WAIT,
    ), [c.status()["links"] for c in (c1, c2, c3)]
    got2, got3 = Collector(), Collector()
    c2.subscribe("PRING.>", got2)
    c3.subscribe("PRING.>", got3)

    def direct() -> bool:
        hops = {(r["origin"], r["hops"]) for r in c1.routes("PRING.>")}
        return hops == {("N2", 1), ("N3", 1)}

    assert wait_until(direct, WAIT), c1.routes()
    pump(c1, "PRING.X", N, got2, got3, end="PRING.END")
    assert_exact(got2, "PRING.X", range(N), "PRING.END")
    assert_exact(got3, "PRING.X", range(N), "PRING.END")
    statuses = [c.status() for c in (c1, c2, c3)]
    assert sum(ln["msgs_out"] for st in statuses for ln in st["links"]) == 2 * (N + 1)
    assert sum(ln["msgs_in"] for st in statuses for ln in st["links"]) == 2 * (N + 1)
    for st in statuses:
        assert st["counters"]["duplicates"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("how", LINKED_BY)
def test_process_chain_middle_killed_and_restarted(
    procs: Any,
    free_port: Callable[[], int],
    client_factory: ClientFactory,
    wait_ready: Callable[..., dict[str, Any]],
    wait_until: WaitUntil,
    tmp_path: Path,
    how: str,
) -> None:
    p1, p2, p3 = free_port(), free_port(), free_port()
    n1 = start_node(procs, how, p1, tmp_path / "n1", "N1", p2)
    n2 = start_node(procs, how, p2, tmp_path / "n2", "N2", p3)
    n3 = start_node(procs, how, p3, tmp_path / "n3", "N3")
    hellos = [
        wait_ready(endpoint(port), WAIT, proc) for port, proc in ((p1, n1), (p2, n2), (p3, n3))
    ]
    first_incarnation = hellos[1]["incarnation"]
    c1, c3 = client_factory(endpoint(p1)), client_factory(endpoint(p3))
    got = Collector()
    c3.subscribe("KILL.>", got)
    assert wait_until(lambda: ("KILL.>", "N3") in client_routes(c1), WAIT), c1.routes()
    pump(c1, "KILL.X", N, got, end="KILL.END")
    assert_exact(got, "KILL.X", range(N), "KILL.END")
    assert c1.status()["counters"]["links_up"] == 1

    n2.send_signal(signal.SIGKILL)
    assert n2.wait(5.0) == -signal.SIGKILL
    n2 = start_node(procs, how, p2, tmp_path / "n2", "N2", p3)
    hello = wait_ready(endpoint(p2), WAIT, n2)
    assert hello["broker_id"] == "N2" and hello["incarnation"] > first_incarnation

    # both neighbours have a fresh link to the new incarnation, and the route is back
    def healed() -> bool:
        s1, s3 = c1.status(), c3.status()
        return (
            s1["counters"]["links_up"] >= 2
            and [ln["state"] for ln in s1["links"]] == ["up"]
            and s3["counters"]["links_up"] >= 2
            and [(ln["peer"], ln["state"]) for ln in s3["links"]] == [("N2", "up")]
            and ("KILL.>", "N3") in client_routes(c1)
        )

    assert wait_until(healed, WAIT), (c1.status()["links"], c3.status()["links"], c1.routes())
    c2 = client_factory(endpoint(p2))
    assert client_routes(c2) == {("KILL.>", "N3")}
    got.clear()
    pump(c1, "KILL.X", N, got, end="KILL.END", start=N)
    assert_exact(got, "KILL.X", range(N, 2 * N), "KILL.END")
    assert c2.status()["counters"]["forwarded"] == N + 1
    assert c3.status()["counters"]["duplicates"] == 0


def test_msgs_before_the_handshake_are_counted_in_messages(
    broker_factory: BrokerFactory, wait_until: WaitUntil
) -> None:
    """A peer that sends MSGS before its LINK_WELCOME: the frame is bad input once
    (``unexpected``), and the messages it held are counted as dropped, each one."""
    import zmq

    from zbroker import wire

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    peer = ctx.socket(zmq.ROUTER)  # plays the node the broker dials
    peer.setsockopt(zmq.LINGER, 0)
    try:
        port = peer.bind_to_random_port(f"tcp://{HOST}")
        b = broker_factory(
            links=(
                LinkConfig(
                    name="early",
                    uri=endpoint(port),
                    reconnect_initial_delay=30.0,
                    reconnect_max_delay=30.0,
                ),
            )
        )
        assert peer.poll(int(WAIT * 1000)), "the broker never dialled"
        ident, hello = peer.recv_multipart()
        assert wire.decode_frame(hello)[0] == wire.LINK_HELLO
        entry = ["EARLY.X", b"p", 0, None, "rawpeer", 1, 1, 0.0, ["rawpeer"], None]
        peer.send_multipart([ident, wire.encode_link(wire.MSGS, [entry] * 3)])

        def counted() -> bool:
            return bool(counters(b)["dropped"].get("link_not_ready", 0) == 3)

        assert wait_until(counted, WAIT)
        c = counters(b)
        assert c["dropped"]["bad_input.unexpected"] == 1
        assert c["bad_input"] == 1
        assert c["delivered"] == 0 and c["forwarded"] == 0
    finally:
        peer.close()


@pytest.mark.parametrize("bad", [-1, 1 << 63, "7"])
def test_a_welcome_with_a_bad_incarnation_is_bad_input_and_no_link(
    broker_factory: BrokerFactory, wait_until: WaitUntil, bad: Any
) -> None:
    """A peer whose LINK_WELCOME states an incarnation that is not an integer in
    0..2**63-1 (what every message's incarnation must be on the wire): the frame is bad
    input (``bad_type``), the link does not come up and the node keeps running."""
    import zmq

    from zbroker import wire

    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    peer = ctx.socket(zmq.ROUTER)  # plays the node the broker dials
    peer.setsockopt(zmq.LINGER, 0)
    try:
        port = peer.bind_to_random_port(f"tcp://{HOST}")
        b = broker_factory(links=(LinkConfig(name="odd", uri=endpoint(port)),))
        assert peer.poll(int(WAIT * 1000)), "the broker never dialled"
        ident, hello = peer.recv_multipart()
        info = dict(wire.decode_frame(hello)[1])
        welcome = {**info, "id": "rawpeer", "name": "odd", "incarnation": bad}
        peer.send_multipart([ident, wire.encode_link(wire.LINK_WELCOME, welcome)])
        assert wait_until(lambda: counters(b)["bad_input"] == 1, WAIT), counters(b)
        assert counters(b)["dropped"]["bad_input.bad_type"] == 1
        assert [x["state"] for x in b.status()["links"]] != ["up"]
        assert counters(b)["links_up"] == 0
        assert b.status()["broker_id"] == b.broker_id  # still answering
    finally:
        peer.close()
