"""Topic-host routing on real nodes: in-thread Brokers in a triangle whose host carries a
hosted branch that the direct link would otherwise take, and the config sources
(``[[host]]``, ``zbroker start --host-topic``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.config import LinkConfig, NodeConfig, load_config
from zbroker.errors import ConfigError
from zbroker.routing.hosts import HOST_PREFIX

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.node import start, start_config
else:
    from zbroker.cli.node import start, start_config

WAIT = 20.0
N = 200
SPECIAL = {"config_file", "peers", "interfaces"}  # start()'s own parameters


def routes(client: Client) -> set[tuple[str, str]]:
    return {(r["pattern"], r["origin"]) for r in client.routes()}


def msgs_out(broker: Broker) -> dict[str, int]:
    return {ln["name"]: ln["msgs_out"] for ln in broker.status()["links"]}


def test_a_hosted_branch_goes_through_its_host_and_interest_only_toward_it(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    wait_until: Callable[..., bool],
) -> None:
    # A - B direct, and A - H - B: ORD.> is hosted on H, other topics go straight
    hport, bport = free_port(), free_port()
    h = broker_factory(broker_id="H", port=hport, host_branches=("ORD.>",))
    b = broker_factory(
        broker_id="B", port=bport, links=(LinkConfig(name="bh", uri=f"tcp://127.0.0.1:{hport}"),)
    )
    a = broker_factory(
        broker_id="A",
        links=(
            LinkConfig(name="ab", uri=f"tcp://127.0.0.1:{bport}"),
            LinkConfig(name="ah", uri=f"tcp://127.0.0.1:{hport}"),
        ),
    )
    ca, cb, ch = (client_factory(x.endpoint) for x in (a, b, h))
    at_b = Collector()
    cb.subscribe("ORD.>", at_b)
    cb.subscribe("LOG.>", at_b)
    host = (HOST_PREFIX + "ORD.>", "H")
    assert wait_until(lambda: {host, ("ORD.>", "B")} <= routes(ch), WAIT)
    assert wait_until(lambda: {host, ("LOG.>", "B")} <= routes(ca), WAIT)
    # B's interest in the hosted branch went to the host only: A never holds it
    assert ("ORD.>", "B") not in routes(ca)
    assert h.status()["interest"]["host_branches"] == ["ORD.>"]
    for i in range(N):
        ca.publish("ORD.k", i)
        ca.publish("LOG.k", i)
    assert at_b.wait_for(2 * N, WAIT)
    assert at_b.topics() == {"ORD.k": N, "LOG.k": N}  # each exactly once
    assert at_b.payloads("ORD.k") == list(range(N))  # one way: in order
    out = msgs_out(a)
    assert out["ah"] == N and out["ab"] == N  # hosted through H, the rest straight to B
    assert sum(msgs_out(h).values()) == N


def test_host_from_toml_and_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[[host]]\npattern = "ORDERS.>"\n\n[[host]]\npattern = "PAY.*"\n')
    assert load_config(path).host_branches == ("ORDERS.>", "PAY.*")
    path.write_text('[[host]]\npattern = "bad..x"\n')
    with pytest.raises(ConfigError, match=r"node.toml: host.pattern: .*bad\.\.x"):
        load_config(path)
    path.write_text('[[host]]\npatern = "X"\n')
    with pytest.raises(ConfigError, match=r"\[\[host\]\] #1: unknown key\(s\) patern"):
        load_config(path)
    path.write_text("[[host]]\n")
    with pytest.raises(ConfigError, match="missing key 'pattern'"):
        load_config(path)
    path.write_text('host = "X"\n')
    with pytest.raises(ConfigError, match=r"written as \[\[host\]\] tables"):
        load_config(path)
    # a list (as a caller may pass) is kept as a tuple: the wrong type on purpose
    assert NodeConfig(host_branches=["A.>"]).host_branches == ("A.>",)  # type: ignore[arg-type]
    args = ("--host-topic", "ORDERS.>", "--host-topic", "X.*", "--no-discovery")
    path.write_text('[[host]]\npattern = "F.>"\n')
    for argv, want in ((args, ("ORDERS.>", "X.*")), (("--no-discovery",), ("F.>",))):
        ctx = start.make_context("start", [*argv, "--config", str(path)])
        flags = {k: v for k, v in ctx.params.items() if k not in SPECIAL}
        with ctx:
            assert start_config(ctx, path, (), (), flags).host_branches == want


def test_flood_from_toml_and_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[[flood]]\npattern = "LOG.>"\n\n[[host]]\npattern = "ORD.>"\n')
    cfg = load_config(path)
    assert (cfg.flood_branches, cfg.host_branches) == (("LOG.>",), ("ORD.>",))
    path.write_text('[[flood]]\npattern = "bad..x"\n')
    with pytest.raises(ConfigError, match=r"node.toml: flood.pattern: .*bad\.\.x"):
        load_config(path)
    path.write_text("[[flood]]\nflood = true\n")
    with pytest.raises(ConfigError, match=r"\[\[flood\]\] #1: unknown key\(s\) flood"):
        load_config(path)
    ctx = start.make_context("start", ["--flood", "LOG.>", "--no-discovery"])
    flags = {k: v for k, v in ctx.params.items() if k not in SPECIAL}
    with ctx:
        assert start_config(ctx, None, (), (), flags).flood_branches == ("LOG.>",)


def test_a_flooded_branch_reaches_a_node_that_never_advertised_interest(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    wait_until: Callable[..., bool],
) -> None:
    # A - B - C, LOG.> flooded on every node: C's subscriber gets A's messages once,
    # and nobody holds C's interest
    bport, cport = free_port(), free_port()
    c = broker_factory(broker_id="C", port=cport, flood_branches=("LOG.>",))
    b = broker_factory(
        broker_id="B",
        port=bport,
        links=(LinkConfig(name="bc", uri=f"tcp://127.0.0.1:{cport}"),),
        flood_branches=("LOG.>",),
    )
    a = broker_factory(
        broker_id="A",
        links=(LinkConfig(name="ab", uri=f"tcp://127.0.0.1:{bport}"),),
        flood_branches=("LOG.>",),
    )
    ca, cc = client_factory(a.endpoint), client_factory(c.endpoint)
    at_c = Collector()
    cc.subscribe("LOG.>", at_c)
    cc.subscribe("ORD.>", at_c)
    assert wait_until(lambda: ("ORD.>", "C") in routes(ca), WAIT)
    assert ("LOG.>", "C") not in routes(ca)
    assert c.status()["interest"]["flood_branches"] == ["LOG.>"]
    for i in range(N):
        ca.publish("LOG.k", i)
    assert at_c.wait_for(N, WAIT)
    assert at_c.payloads("LOG.k") == list(range(N))  # once each, in order
    assert msgs_out(a) == {"ab": N} and msgs_out(b)["bc"] == N
