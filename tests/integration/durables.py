"""The harness of the durable-subscription tests (``test_durable*.py``) and of the network
tests that lean on durables: the node's limits for them, readers of a durable's status, and
a subscriber in another process (``subscriber_script``: one JSON line per event,
``--kill-at`` to die before an acknowledgement). Link timings: ``tests.node_configs``.

In-thread brokers (``broker_factory``) and real Clients on 127.0.0.1; tests marked ``slow``
also run subprocesses (the subscriber script run with ``sys.executable``, the ``zbroker``
console script), always through the ``procs`` fixture, which stops every one of them by PID.
Waiting is done by polling a condition with a bound, never by fixed sleeps.

Exactly-once is proved with a final "barrier" message published after the ones a test
counts: a node stores one publisher's messages in order and sends one durable
subscription's messages down one connection in order, so once the barrier arrived every
earlier message (or a duplicate of it) has arrived too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zbroker import Broker, Client

HOST = "127.0.0.1"
WAIT = 20.0  # seconds: upper bound of any condition wait (generous: CI machines are slow)

BrokerFactory = Callable[..., Broker]
ClientFactory = Callable[..., Client]
WaitUntil = Callable[..., bool]


def endpoint(port: int) -> str:
    return f"tcp://{HOST}:{port}"


def numbers(n: int, start: int = 0) -> list[bytes]:
    """The payloads ``b"start"`` .. ``b"start+n-1"``."""
    return [str(i).encode() for i in range(start, start + n)]


def publish_all(client: Client, topic: str, payloads: list[bytes]) -> None:
    for p in payloads:
        client.publish(topic, p)


def durable_of(source: Broker | Client, name: str) -> dict[str, Any] | None:
    """The node's status entry of durable subscription ``name`` (None: no such one)."""
    for d in source.status()["durables"]:
        if d["name"] == name:
            result: dict[str, Any] = d
            return result
    return None


def durable_is(source: Broker | Client, name: str, **expected: Any) -> bool:
    """True if durable ``name`` exists and its status entry has the ``expected`` values."""
    d = durable_of(source, name)
    return d is not None and all(d[k] == v for k, v in expected.items())


def route_patterns(source: Broker | Client) -> set[str]:
    """Patterns of the node's interest table (local and remote)."""
    if isinstance(source, Broker):
        rows: list[dict[str, Any]] = source.call(lambda node: node.engine.interest())
    else:
        rows = source.routes()
    return {r["pattern"] for r in rows}


def detach_and_sync(client: Client, sub: Any) -> None:
    """Detach a durable subscription; the round trip after it proves the node processed
    the detach (one connection: the node handles its frames in order)."""
    sub.unsubscribe()
    client.status()


# -- a subscriber in another process ------------------------------------------------------------

#: Opens (or reattaches to) a durable subscription and prints one JSON line per event:
#: ``{"event": "ready", "info": ...}`` once attached, ``{"event": "msg", ...}`` per message
#: (flushed before the callback returns, so before it is acknowledged), ``{"event":
#: "done"}`` after ``--count`` messages (then it detaches, syncs and exits 0). With
#: ``--kill-at K`` it SIGKILLs itself inside the callback of the K-th message, after
#: printing it and before acknowledging it.
SUBSCRIBER_SCRIPT = r"""
import argparse
import json
import os
import signal
import sys
import threading

from zbroker import Client

parser = argparse.ArgumentParser()
parser.add_argument("endpoint")
parser.add_argument("pattern")
parser.add_argument("name")
parser.add_argument("--count", type=int, required=True)
parser.add_argument("--credit", type=int, default=100)
parser.add_argument("--kill-at", type=int, default=0)
parser.add_argument("--timeout", type=float, default=60.0)
args = parser.parse_args()

lock = threading.Lock()
seen = 0
done = threading.Event()
printed_ready = threading.Event()


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def on_message(msg):
    global seen
    # deliveries may start before subscribe() returns: "ready" is printed first (the
    # node's reply precedes them on the connection, so subscribe() can return meanwhile)
    printed_ready.wait(30)
    with lock:
        seen += 1
        n = seen
    emit(
        {
            "event": "msg" if n <= args.count else "extra",
            "n": n,
            "topic": msg.topic,
            "payload": msg.payload.decode(),
            "redelivered": msg.redelivered,
            "id": str(msg.id),
        }
    )
    if n == args.kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if n >= args.count:
        done.set()


client = Client(args.endpoint, timeout=10.0, heartbeat_timeout=30.0)
sub = client.subscribe(args.pattern, on_message, durable=args.name, credit=args.credit)
emit({"event": "ready", "info": client.durable_info[args.name]})
printed_ready.set()
if not done.wait(args.timeout):
    emit({"event": "timeout", "seen": seen})
    client.close()
    sys.exit(3)
sub.unsubscribe()
client.status()  # a round trip: the acknowledgements and the detach reached the node
client.close()
emit({"event": "done"})
"""


@pytest.fixture
def subscriber_script(tmp_path: Path) -> Path:
    path = tmp_path / "durable_subscriber.py"
    path.write_text(SUBSCRIBER_SCRIPT, encoding="utf-8")
    return path


def start_subscriber(
    procs: Any,
    script: Path,
    ep: str,
    pattern: str,
    name: str,
    *,
    count: int,
    credit: int = 100,
    kill_at: int = 0,
) -> Any:
    args = [sys.executable, str(script), ep, pattern, name, "--count", str(count)]
    args += ["--credit", str(credit), "--kill-at", str(kill_at)]
    return procs.start(args)


def next_event(proc: Any, timeout: float = WAIT) -> dict[str, Any]:
    line = proc.readline(timeout)
    assert line is not None, (
        f"no output from {proc.describe()} within {timeout:g} s; "
        f"exit {proc.poll()}; stderr: {proc.stderr_text()!r}"
    )
    event: dict[str, Any] = json.loads(line)
    return event


def wait_ready_event(proc: Any) -> dict[str, Any]:
    event = next_event(proc)
    assert event["event"] == "ready", event
    info: dict[str, Any] = event["info"]
    return info


def read_messages(proc: Any, n: int, timeout: float = WAIT) -> list[dict[str, Any]]:
    """The next ``n`` message events of a subscriber process."""
    out: list[dict[str, Any]] = []
    for _ in range(n):
        event = next_event(proc, timeout)
        assert event["event"] == "msg", (event, out)
        out.append(event)
    return out


def finish(proc: Any) -> None:
    """Wait for a subscriber process that has its count to say done and exit 0."""
    event = next_event(proc)
    assert event == {"event": "done"}, event
    assert proc.wait(WAIT) == 0, proc.stderr_text()
    assert "Traceback" not in proc.stderr_text(), proc.stderr_text()


def ints(events: list[dict[str, Any]]) -> list[int]:
    return [int(e["payload"]) for e in events]
