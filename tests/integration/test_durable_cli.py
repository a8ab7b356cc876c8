"""``zbroker sub --durable``: exactly the stored messages, ``--count`` leaving the rest
stored, a usage error for two patterns, and a killed subscriber's messages coming again;
``zbroker delete-durable``: the durable and what it stored gone, so it can be made anew
with another selector (:mod:`.durables`; every process through ``procs``, stopped by its
PID)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Collector
from tests.integration.durables import (
    WAIT,
    ClientFactory,
    WaitUntil,
    detach_and_sync,
    durable_is,
    durable_of,
    endpoint,
    numbers,
    publish_all,
    start_subscriber,
)
from tests.integration.durables import subscriber_script as subscriber_script  # (the fixture)
from zbroker import Broker

# -- 10. CLI --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cli_sub_durable_receives_exactly_the_stored_messages(
    broker: Broker, client_factory: ClientFactory, procs: Any, wait_until: WaitUntil
) -> None:
    n = 12
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("CLI.>", lambda m: None, durable="cli"))
    publish_all(client, "CLI.X", numbers(n))
    assert wait_until(lambda: durable_is(broker, "cli", stored=n), WAIT)

    args = ("sub", "CLI.>", "--durable", "cli", "--json", "--broker", broker.endpoint)
    rc, out, err = procs.run(*args, "--count", str(n), timeout=WAIT)
    assert rc == 0, err
    assert "Traceback" not in err
    objs = [json.loads(line) for line in out.splitlines()]
    assert [o["payload"] for o in objs] == [str(i) for i in range(n)]
    assert all(o["topic"] == "CLI.X" and o["pattern"] == "CLI.>" for o in objs)
    # every one was acknowledged, also the last before the process exited
    assert wait_until(lambda: durable_is(broker, "cli", stored=0), WAIT), durable_of(broker, "cli")

    # a second run gets only what came since: nothing of the first run again
    client.publish("CLI.X", b"next")
    assert wait_until(lambda: durable_is(broker, "cli", stored=1), WAIT)
    rc, out, err = procs.run(*args, "--count", "1", timeout=WAIT)
    assert rc == 0, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == ["next"]


@pytest.mark.slow
def test_cli_sub_durable_count_leaves_the_rest_stored(
    broker: Broker, client_factory: ClientFactory, procs: Any, wait_until: WaitUntil
) -> None:
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("CLR.>", lambda m: None, durable="clr"))
    publish_all(client, "CLR.X", numbers(10))
    assert wait_until(lambda: durable_is(broker, "clr", stored=10), WAIT)
    args = ("sub", "CLR.>", "--durable", "clr", "--json", "--broker", broker.endpoint)
    rc, out, err = procs.run(*args, "--count", "3", timeout=WAIT)
    assert rc == 0, err
    assert [json.loads(line)["payload"] for line in out.splitlines()] == ["0", "1", "2"]
    # the 7 not printed are still there for the next run
    assert wait_until(lambda: durable_is(broker, "clr", stored=7), 3.0), durable_of(broker, "clr")


@pytest.mark.slow
def test_cli_sub_durable_with_two_patterns_is_a_usage_error(procs: Any) -> None:
    rc, out, err = procs.run(
        "sub", "A.>", "B.>", "--durable", "two", "--broker", endpoint(1), timeout=WAIT
    )
    assert rc == 2, (out, err)
    assert "--durable takes exactly one PATTERN" in err
    assert "Traceback" not in err
    assert out == ""


@pytest.mark.slow
def test_cli_delete_durable_drops_it_and_its_messages(
    broker: Broker, client_factory: ClientFactory, procs: Any, wait_until: WaitUntil
) -> None:
    # the selector-change error says "delete it first": this is how, from a shell
    client = client_factory(broker.endpoint)
    detach_and_sync(client, client.subscribe("DEL.>", lambda m: None, durable="del"))
    publish_all(client, "DEL.X", numbers(7))
    assert wait_until(lambda: durable_is(broker, "del", stored=7), WAIT)
    args = ("delete-durable", "del", "--broker", broker.endpoint)
    rc, out, err = procs.run(*args, timeout=WAIT)
    assert (rc, out, err) == (0, "deleted durable del: 7 stored message(s) went with it\n", "")
    assert durable_of(broker, "del") is None
    rc, out, err = procs.run(*args, timeout=WAIT)  # a second time: no such durable now
    assert (rc, out) == (1, ""), err
    assert (
        err
        == "Error: no durable subscription named 'del' on the nodes reachable: nothing deleted\n"
    )
    rc, out, err = procs.run(*args, "--missing-ok", timeout=WAIT)
    assert (rc, out, err) == (0, "no durable del: nothing deleted\n", "")
    got = Collector()  # made anew, with a selector the old one did not have: nothing old
    client.subscribe("DEL.>", got, durable="del", selector="n = 1")
    client.publish("DEL.X", b"new", headers={"n": 1})
    assert got.wait_for(1)
    assert got.payloads() == [b"new"]
    rc, _, err = procs.run("delete-durable", "no way", "--broker", broker.endpoint, timeout=WAIT)
    assert rc == 1 and "durable subscription name: 'no way' is not a valid name" in err, err


@pytest.mark.slow
def test_a_killed_subscriber_is_detached_and_what_it_had_comes_again(
    broker: Broker,
    client_factory: ClientFactory,
    procs: Any,
    subscriber_script: Path,
    wait_until: WaitUntil,
) -> None:
    """A subscriber process with credit 5 attaches to 20 stored messages and is killed
    (kill -9) at the third, with messages in flight to it and more waiting. With its credit
    used up the node never sends to it again, so it used to stay "attached" for ever. The
    node's probe (a PING it ignores, every DURABLE_PROBE_INTERVAL) finds the connection
    gone and detaches it; the next subscriber gets everything not acknowledged, the
    in-flight ones flagged redelivered."""
    from zbroker.features.durables import DURABLE_PROBE_INTERVAL

    setup = client_factory(broker.endpoint)
    detach_and_sync(setup, setup.subscribe("KILL.>", lambda m: None, durable="killed"))
    publish_all(client_factory(broker.endpoint), "KILL.X", numbers(20))
    assert wait_until(lambda: durable_is(broker, "killed", stored=20), WAIT)
    proc = start_subscriber(
        procs, subscriber_script, broker.endpoint, "KILL.>", "killed", count=100, credit=5,
        kill_at=3,
    )  # fmt: skip
    assert proc.wait(WAIT) == -signal.SIGKILL
    t0 = time.monotonic()
    assert wait_until(lambda: durable_is(broker, "killed", attached=False), WAIT)
    assert time.monotonic() - t0 < DURABLE_PROBE_INTERVAL + 2.0
    stored = durable_of(broker, "killed")
    assert stored is not None
    k = stored["stored"]  # 20 less what it acknowledged before it died (at most 2)
    f = stored["in_flight"]  # sent to it, never acknowledged (its credit: at most 5)
    assert 18 <= k <= 20 and 1 <= f <= 5, stored
    got = Collector()
    client_factory(broker.endpoint).subscribe("KILL.>", got, durable="killed", credit=100)
    assert got.wait_for(k)
    assert wait_until(lambda: durable_is(broker, "killed", stored=0, in_flight=0), WAIT)
    assert got.payloads() == numbers(20)[20 - k :]
    # what it had been sent and not acknowledged comes flagged; what was never sent not
    assert got.redelivered() == [True] * f + [False] * (k - f)
