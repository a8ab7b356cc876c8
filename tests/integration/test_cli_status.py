"""``zbroker status``: the text table (a few patterns listed, the rest counted; unrouted
publishes and advisories) and ``--json``, against an in-thread Broker driven through
CliRunner. Every address is 127.0.0.1."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from tests.helpers import Collector
from tests.integration.cli_runs import invoke
from zbroker import Broker, Client

if TYPE_CHECKING:  # cli/ installs as zbroker.cli (pyproject.toml); mypy reads it as cli/
    from cli.status_text import STATUS_PATTERNS_SHOWN
else:
    from zbroker.cli.status_text import STATUS_PATTERNS_SHOWN

ClientFactory = Callable[..., Client]


def test_status_table(broker: Broker, client_factory: ClientFactory) -> None:
    client = client_factory(broker.endpoint)
    client.subscribe("TABLE.>", Collector())
    client.publish("TABLE.X", b"x")
    result = invoke("status", "--broker", broker.endpoint)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert broker.broker_id in out
    for name, port in broker.ports.items():
        assert re.search(rf"^{name} endpoint\s+tcp://127\.0\.0\.1:{port}$", out, re.M), out
    assert re.search(rf"^incarnation\s+{broker.incarnation}$", out, re.M), out
    assert re.search(r"^received\s+1$", out, re.M), out
    assert re.search(r"^subscriptions\s+1$", out, re.M), out
    assert "TABLE.>" in out
    # what the README says the text shows: the protocol version, and every other counter
    # under the name --json, the docs and the metrics give it
    assert re.search(rf"^protocol version\s+{broker.status()['version']}$", out, re.M), out
    for name in ("forwarded", "duplicates", "shortcut", "durable_moves", "durable_adopted"):
        assert re.search(rf"^{name}\s+\d+$", out, re.M), (name, out)


def test_status_text_lists_a_few_patterns_and_counts_the_rest(
    broker: Broker, client_factory: ClientFactory
) -> None:
    """A node with tens of thousands of subscriptions printed every one of them (40,000
    lines for 40,000) before its links and interest: the text lists the first ones."""

    client = client_factory(broker.endpoint)
    n = STATUS_PATTERNS_SHOWN + 7
    for i in range(n):
        client.subscribe(f"MANY.{i:03d}", Collector())
    out = invoke("status", "--broker", broker.endpoint).stdout
    listed = re.findall(r"^  pattern\s+(\S+)$", out, re.M)
    assert listed == [f"MANY.{i:03d}" for i in range(STATUS_PATTERNS_SHOWN)]
    assert re.search(r"^  \.\.\.\s+7 more \(zbroker status --json lists every one\)$", out, re.M)
    assert re.search(rf"^subscriptions\s+{n}$", out, re.M), out
    js = json.loads(invoke("status", "--broker", broker.endpoint, "--json").stdout)
    assert len(js["subscriptions"]["patterns"]) == n


def test_status_text_shows_unrouted_publishes_and_advisories(
    broker: Broker, client_factory: ClientFactory, wait_until: Callable[..., bool]
) -> None:
    """Two fields the text left to --json: client publishes nobody anywhere wanted, and
    the advisories published or held back."""
    client = client_factory(broker.endpoint)
    for i in range(3):
        client.publish("NOBODY.X", b"%d" % i)
    assert wait_until(lambda: broker.status()["counters"]["unrouted"] == 3, 10)
    out = invoke("status", "--broker", broker.endpoint).stdout
    assert re.search(r"^no subscriber\s+3$", out, re.M), out
    assert re.search(r"^advisories\s+\d+ published, 0 suppressed$", out, re.M), out


def test_status_json(broker: Broker) -> None:
    result = invoke("status", "--broker", broker.endpoint, "--json")
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert status["broker_id"] == broker.broker_id
    assert status["incarnation"] == broker.incarnation
    assert status["endpoints"]["control"] == broker.endpoint
    assert status["counters"]["received"] == 0
    assert status["subscriptions"] == {"count": 0, "patterns": []}
