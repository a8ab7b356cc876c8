"""A zbroker client for the network-namespace tests, run *inside* a namespace with
``ip netns exec NS python nsclient.py MODE ...``. Every event is one JSON line on stdout
with ``t`` = ``time.time()`` (the namespaces share the host's clock), so the test can
measure times across processes. SIGTERM ends every mode cleanly (the client is closed).

Modes:

``sub``      connect (``--want ID``: reconnect until the node is that one), subscribe to
             ``--pattern`` (repeatable) and print ``{"event": "msg", ...}`` per message
             with ``via`` = the node the client is connected to at delivery time;
             ``--report-candidates`` also prints the nodes it could fail over to.
``pub``      publish ``{"i": N, "t": ...}`` on ``--topic`` every ``--interval`` seconds;
             on SIGTERM publish an end marker ``{"i": -1, "last": N}`` and exit.
``monitor``  poll the node's peers and links every ``--interval`` seconds and print the
             view whenever it changes.

Exit status: 0 after SIGTERM, 2 if the first connection fails within ``--connect-timeout``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from typing import Any

from zbroker import Client, Message, ZBrokerError

_out_lock = threading.Lock()


class _StopFlag:
    """Set by SIGTERM/SIGINT. Not a threading.Event: its set() takes a lock that the main
    thread may hold inside wait() when the handler runs, and the helper would hang."""

    def __init__(self) -> None:
        self.up = False

    def set(self) -> None:
        self.up = True

    def is_set(self) -> bool:
        return self.up

    def wait(self, timeout: float | None = None) -> bool:
        end = None if timeout is None else time.monotonic() + timeout
        while not self.up:
            left = 0.02 if end is None else min(0.02, end - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)
        return self.up


_stop = _StopFlag()


def emit(event: str, **fields: Any) -> None:
    line = json.dumps({"event": event, "t": time.time(), **fields}, default=repr)
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def connect(args: argparse.Namespace, want: str | None = None) -> Client | None:
    """A connected client (to node ``want`` when given), retried until the deadline."""
    deadline = time.monotonic() + args.connect_timeout
    last = ""
    while not _stop.is_set() and time.monotonic() < deadline:
        try:
            client = Client(
                args.broker,
                interfaces=args.interface or None,
                timeout=min(args.timeout, max(0.5, deadline - time.monotonic())),
            )
        except ZBrokerError as exc:
            last = str(exc)
            time.sleep(0.05)
            continue
        if want is not None and client.broker_id != want:
            emit("skip", broker=client.broker_id, want=want)
            client.close()
            time.sleep(0.1)
            continue
        emit("connected", broker=client.broker_id)
        return client
    emit("error", where="connect", error=last or "stopped")
    return None


def _plain(payload: Any) -> Any:
    if isinstance(payload, bytes):
        return payload.decode("utf-8", "replace")
    return payload


def run_sub(args: argparse.Namespace) -> int:
    client = connect(args, args.want)
    if client is None:
        return 2

    def on_message(msg: Message) -> None:
        emit(
            "msg",
            topic=msg.topic,
            payload=_plain(msg.payload),
            origin=msg.origin,
            incarnation=msg.incarnation,
            seq=msg.seq,
            via=client.hello.get("broker_id"),
        )

    def report_candidates() -> None:
        # the nodes the client could fail over to (zeroconf: found on the LAN so far)
        last: list[str] | None = None
        while not _stop.wait(0.05):
            found = list(client._locator.candidates())
            if found != last:
                emit("candidates", endpoints=found)
                last = found

    try:
        for pattern in args.pattern:
            client.subscribe(pattern, on_message)
        emit("subscribed", broker=client.broker_id, patterns=args.pattern)
        if args.report_candidates:
            threading.Thread(target=report_candidates, daemon=True).start()
        _stop.wait()
    finally:
        client.close()
    emit("closed")
    return 0


def run_pub(args: argparse.Namespace) -> int:
    client = connect(args)
    if client is None:
        return 2
    i = 0
    try:
        emit("publishing", broker=client.broker_id, topic=args.topic)
        while not _stop.is_set():
            try:
                client.publish(args.topic, {"i": i, "t": time.time()})
            except ZBrokerError as exc:
                emit("error", where="publish", i=i, error=str(exc))
            else:
                i += 1
            _stop.wait(args.interval)
        client.publish(args.topic, {"i": -1, "last": i - 1, "t": time.time()})
        emit("done", last=i - 1)
    finally:
        client.close()
    return 0


def run_monitor(args: argparse.Namespace) -> int:
    client = connect(args)
    if client is None:
        return 2
    last: Any = None
    failing = False
    try:
        while not _stop.is_set():
            try:
                peers = client.peers()
                links = client.status()["links"]
            except ZBrokerError as exc:
                if not failing:
                    emit("error", where="poll", error=str(exc))
                failing = True
            else:
                failing = False
                view = {
                    "peers": {
                        p["id"]: {"state": p["state"], "found_by": p["found_by"]} for p in peers
                    },
                    "links": sorted(
                        [ln["name"], ln["kind"], ln["peer"], ln["state"]] for ln in links
                    ),
                }
                if view != last:
                    emit("view", **view)
                    last = view
            _stop.wait(args.interval)
    finally:
        client.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["sub", "pub", "monitor"])
    parser.add_argument("--broker", required=True)
    parser.add_argument("--interface", action="append", default=[])
    parser.add_argument("--pattern", action="append", default=[])
    parser.add_argument("--topic", default="T.x")
    parser.add_argument("--want")
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--connect-timeout", type=float, default=30.0)
    parser.add_argument("--report-candidates", action="store_true")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: _stop.set())
    signal.signal(signal.SIGINT, lambda *_: _stop.set())
    return {"sub": run_sub, "pub": run_pub, "monitor": run_monitor}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
