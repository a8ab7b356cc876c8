"""``zbroker events``: follow the network's advisories (and, asked for, the nodes' STATS),
one line each, until Ctrl-C or ``--count``."""

from __future__ import annotations

import datetime
import json
import signal
import threading
from typing import Any

import click

from zbroker.features.advisories import KINDS, SUMMARY_KINDS

from .app import broker_option, cli, connect_or_stop, connection_options
from .format import _jsonable
from .signals import SignalStop

__all__ = ["KNOWN_KINDS", "event_patterns", "events", "format_event_json", "format_event_text"]

#: the kinds a node publishes: its events', the summaries', and STATS (the SYS topic)
KNOWN_KINDS = frozenset([*KINDS.values(), *SUMMARY_KINDS, "STATS"])


def event_patterns(kinds: tuple[str, ...]) -> list[str]:
    """The subscription patterns for ``kinds`` (none: every advisory; STATS: the nodes'
    ``$ZB.SYS.<id>.STATS``)."""
    if not kinds:
        return ["$ZB.ADVISORY.>"]
    out = []
    for kind in kinds:
        if kind not in KNOWN_KINDS:  # (else it would wait for ever for what never comes)
            raise click.BadParameter(
                f"{kind!r} is not a kind: one of {', '.join(sorted(KNOWN_KINDS))}",
                param_hint="KIND",
            )
        pattern = "$ZB.SYS.*.STATS" if kind == "STATS" else f"$ZB.ADVISORY.*.{kind}"
        if pattern not in out:
            out.append(pattern)
    return out


def format_event_json(topic: str, body: Any) -> str:
    """One JSON object: the advisory's fields, its topic under ``advisory`` and under
    ``topic`` (unless the advisory has a field of that name: NO_SUBSCRIBER's is the topic
    nobody wanted, which stays)."""
    fields = body if isinstance(body, dict) else {"payload": body}
    return json.dumps(
        {"advisory": topic, "topic": topic, **_jsonable(fields)}, separators=(",", ":")
    )


def format_event_text(topic: str, body: Any) -> str:
    """``TIME BROKER KIND field=value ...`` (the common fields left out)."""
    if not isinstance(body, dict):
        return f"{topic} {body!r}"
    parts = topic.split(".")
    kind = str(body.get("kind") or parts[-1])
    broker = str(body.get("broker") or (parts[2] if len(parts) > 3 else "?"))
    ts = body.get("time")
    when = (
        datetime.datetime.fromtimestamp(ts, datetime.UTC).isoformat(timespec="milliseconds")
        if isinstance(ts, int | float)
        else "-"
    )
    common = {"kind", "broker", "time", "seq"}
    fields = [
        f"{k}={json.dumps(_jsonable(v), separators=(',', ':'))}"
        for k, v in body.items()
        if k not in common and not (k == "suppressed" and not v)
    ]
    return " ".join([when, broker, kind, *fields])


@cli.command()
@click.argument("kinds", nargs=-1)
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option(
    "--count", "-n", type=click.IntRange(min=1), default=None, help="Exit after this many events."
)
@connection_options()
def events(kinds: tuple[str, ...], as_json: bool, count: int | None, **conn: Any) -> None:
    """Print the network's advisories (only KIND... if given, e.g. LINK_DOWN; STATS: the
    nodes' periodic counters) one per line, until Ctrl-C (or --count)."""
    patterns = event_patterns(kinds)
    done = threading.Event()
    seen = 0
    lock = threading.Lock()

    def on_message(msg: Any) -> None:
        nonlocal seen
        with lock:
            if done.is_set():
                return
            if as_json:
                line = format_event_json(msg.topic, msg.payload)
            else:
                line = format_event_text(msg.topic, msg.payload)
            click.echo(line)
            seen += 1
            if count is not None and seen >= count:
                done.set()

    signals = SignalStop(signal.SIGTERM, signal.SIGINT)
    connected = connect_or_stop(signals, **conn)
    if connected is None:
        return  # stopped while the node had not answered yet
    with connected as client:
        for p in patterns:
            client.subscribe(p, on_message)
        click.echo(f"following {', '.join(patterns)} on {client.broker_id}", err=True)
        while not done.is_set() and not signals.wait(0.2):
            pass
