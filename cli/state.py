"""Commands for topics with state: ``set``, ``remove``, ``fetch``, ``topics``.

``**conn`` is what :func:`~.app.broker_option` and :func:`~.app.connection_options` parsed,
passed on to :func:`~.app.connect` as is."""

from __future__ import annotations

import json
import time
from typing import Any

import click

from .app import broker_option, cli, connect, connection_options
from .format import format_message_json, format_message_text


class SnapshotMarks:
    """``zbroker sub``'s snapshot-complete marker: after a pattern's snapshot values (if it
    had any: a snapshot of nothing prints nothing, so plain pub/sub output is unchanged),
    before its live messages. Called under the command's output lock."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.marked: set[str] = set()  # patterns whose snapshot is complete
        self.valued: set[str] = set()  # patterns whose snapshot held values

    def saw(self, msg: Any) -> None:
        """A message is about to be printed."""
        if msg.initial:
            self.valued.add(msg.pattern)
        else:
            self.mark(msg.pattern)

    def mark(self, pattern: str) -> None:
        """``pattern``'s snapshot is complete (its subscribe returned, or a live message)."""
        if pattern in self.marked:
            return
        self.marked.add(pattern)
        if pattern in self.valued and self.as_json:
            click.echo(
                json.dumps({"snapshot": "complete", "pattern": pattern}, separators=(",", ":"))
            )
        elif pattern in self.valued:
            click.echo(f"snapshot of {pattern} complete", err=True)


@cli.command("set")
@click.argument("topic")
@click.argument("value")
@broker_option()
@connection_options()
def set_(topic: str, value: str, **conn: Any) -> None:
    """Set stateful TOPIC's value to VALUE (text); prints its version."""
    from zbroker.topics import validate_publish_topic

    validate_publish_topic(topic)
    with connect(**conn) as client:
        version = client.set(topic, value.encode())
    click.echo(f"set {topic} version {version}", err=True)


@cli.command()
@click.argument("pattern")
@broker_option()
@connection_options()
def remove(pattern: str, **conn: Any) -> None:
    """Remove every stateful topic PATTERN matches (on every node)."""
    from zbroker.topics import validate_pattern

    validate_pattern(pattern)
    with connect(**conn) as client:
        n = client.remove(pattern)
    click.echo(f"removed {n} topic(s)", err=True)


@cli.command()
@click.argument("pattern")
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@connection_options()
def fetch(pattern: str, as_json: bool, **conn: Any) -> None:
    """Print the current value of every stateful topic PATTERN matches."""
    from zbroker.topics import validate_pattern

    validate_pattern(pattern)
    with connect(**conn) as client:
        msgs = client.fetch(pattern)
    fmt = format_message_json if as_json else format_message_text
    for msg in msgs:
        click.echo(fmt(msg))


@cli.command()
@click.argument("pattern", required=False, default=">")
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@connection_options()
def topics(pattern: str, as_json: bool, **conn: Any) -> None:
    """List the stateful topics PATTERN matches (default all): size, owner, updated,
    replica of."""
    from zbroker.topics import validate_pattern

    validate_pattern(pattern)
    with connect(**conn) as client:
        rows = client.topics(pattern)
    if as_json:
        for row in rows:
            click.echo(json.dumps(row, separators=(",", ":")))
        return
    click.echo(f"{'TOPIC':<32} {'SIZE':>8}  {'OWNER':<24} {'UPDATED':<19}  REPLICA OF")
    for row in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row["updated"]))
        click.echo(
            f"{row['topic']:<32} {row['size']:>8}  {row['owner']:<24} {when:<19}  "
            f"{row['replica_of'] or '-'}"
        )
