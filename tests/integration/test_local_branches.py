"""Local branches on real nodes: in-thread Brokers on a configured link whose options push
the branch (static) and let everything through, the status and routes that mark them,
and the config sources (``[routing] local``, ``zbroker start --local``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from click.testing import CliRunner

from tests.helpers import Collector
from zbroker import Broker, Client
from zbroker.config import LinkConfig, NodeConfig, load_config
from zbroker.errors import ConfigError

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.main import cli
    from cli.node import start, start_config
else:
    from zbroker.cli.main import cli
    from zbroker.cli.node import start, start_config

WAIT = 20.0
N = 100
SPECIAL = {"config_file", "peers", "interfaces"}  # start()'s own parameters


def link_out(broker: Broker) -> int:
    (link,) = broker.status()["links"]
    n: int = link["msgs_out"]
    return n


def test_a_local_branch_never_leaves_its_node_on_a_configured_link(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    free_port: Callable[[], int],
    wait_until: Callable[..., bool],
) -> None:
    bport = free_port()
    b = broker_factory(broker_id="B", port=bport)
    link = LinkConfig(
        name="ab", uri=f"tcp://127.0.0.1:{bport}", static=("CACHE.>",), include=("CACHE.>", "ORD.>")
    )
    a = broker_factory(broker_id="A", links=(link,), local_branches=("CACHE.>",))
    ca, cb = client_factory(a.endpoint), client_factory(b.endpoint)
    at_a, at_b = Collector(), Collector()
    ca.subscribe("CACHE.>", at_a)
    cb.subscribe("CACHE.>", at_b)
    cb.subscribe("ORD.>", at_b)
    assert wait_until(lambda: {("ORD.>", "B"), ("CACHE.>", "B")} <= routes(ca), WAIT)
    for i in range(N):
        ca.publish("CACHE.k", i)
        ca.publish("ORD.k", i)
    ca.publish("ORD.end", b"end")
    assert at_b.wait_topic("ORD.end", WAIT) and at_a.wait_for(N, WAIT)
    assert at_b.topics() == {"ORD.k": N, "ORD.end": 1}  # no CACHE.* crossed, static or not
    assert at_a.topics() == {"CACHE.k": N}
    assert link_out(a) == N + 1
    # A's interest in its branch was never advertised; B's reached A (and stays unused)
    assert ("CACHE.>", "A") not in routes(cb)
    rows = {(r["pattern"], r["origin"]): r for r in ca.routes()}
    assert rows["CACHE.>", "A"]["local_branch"] is True
    assert rows["CACHE.>", "B"]["local_branch"] is True
    assert a.status()["interest"]["local_branches"] == ["CACHE.>"]
    assert b.status()["interest"]["local_branches"] == []
    # the CLI marks them
    r = CliRunner().invoke(cli, ["routes", "--broker", a.endpoint])
    assert r.exit_code == 0 and "CACHE.> (local branch)" in r.output, r.output
    r = CliRunner().invoke(cli, ["status", "--broker", a.endpoint])
    assert "local branches" in r.output and "CACHE.> (never leave this node)" in r.output


def routes(client: Client) -> set[tuple[str, str]]:
    return {(r["pattern"], r["origin"]) for r in client.routes()}


def test_routing_local_from_toml_and_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[routing]\nlocal = ["CACHE.>", "TMP.*"]\n')
    assert load_config(path).local_branches == ("CACHE.>", "TMP.*")
    path.write_text('[routing]\nlocal = ["CACHE.>", "bad..x"]\n')
    with pytest.raises(ConfigError, match=r"node.toml: routing.local: .*bad\.\.x"):
        load_config(path)
    path.write_text('[routing]\nlocal = "CACHE.>"\n')
    with pytest.raises(ConfigError, match="is not a list of patterns"):
        load_config(path)
    path.write_text('[routing]\nremote = ["X"]\n')
    with pytest.raises(ConfigError, match=r"unknown key routing.remote \(known: local\)"):
        load_config(path)
    # a list (as a caller may pass) is kept as a tuple: the wrong type on purpose
    assert NodeConfig(local_branches=["A.>"]).local_branches == ("A.>",)  # type: ignore[arg-type]
    args = ("--local", "CACHE.>", "--local", "X.*", "--no-discovery")  # (click eats lists)
    ctx = start.make_context("start", list(args))
    flags = {k: v for k, v in ctx.params.items() if k not in SPECIAL}
    with ctx:
        cfg = start_config(ctx, None, (), (), flags)
    assert cfg.local_branches == ("CACHE.>", "X.*")
    # a flag replaces the file's list; no flag keeps it
    path.write_text('[routing]\nlocal = ["F.>"]\n')
    for argv, want in ((args, ("CACHE.>", "X.*")), (("--no-discovery",), ("F.>",))):
        ctx = start.make_context("start", [*argv, "--config", str(path)])
        flags = {k: v for k, v in ctx.params.items() if k not in SPECIAL}
        with ctx:
            assert start_config(ctx, path, (), (), flags).local_branches == want


def test_a_local_branch_stops_another_nodes_flood_copies(
    broker_factory: Callable[..., Broker],
    client_factory: Callable[..., Client],
    wait_until: Callable[..., bool],
) -> None:
    # chain A - B - C: A floods LOG.>, B holds it as a local branch. A flood copy reaching
    # B is delivered there and goes no further (the flood mark does not override B's rule)
    a = broker_factory(broker_id="A", flood_branches=("LOG.>",))
    b = broker_factory(
        broker_id="B", local_branches=("LOG.>",), links=(LinkConfig(name="ba", uri=a.endpoint),)
    )
    c = broker_factory(broker_id="C", links=(LinkConfig(name="cb", uri=b.endpoint),))
    ca, cb, cc = client_factory(a.endpoint), client_factory(b.endpoint), client_factory(c.endpoint)
    at_b, at_c = Collector(), Collector()
    cb.subscribe("LOG.>", at_b)
    cc.subscribe("LOG.>", at_c)
    cc.subscribe("END", at_c)
    assert wait_until(lambda: ("END", "C") in routes(ca), WAIT)
    for i in range(5):
        ca.publish("LOG.app", i)
    ca.publish("END", b"end")  # the same way as any relayed LOG copy: behind them
    assert at_c.wait_topic("END", WAIT) and at_b.wait_for(5, WAIT)
    assert at_b.topics() == {"LOG.app": 5}
    assert at_c.topics() == {"END": 1}  # no LOG.app crossed B
