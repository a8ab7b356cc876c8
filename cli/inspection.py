"""Inspection commands: ``status``, ``routes``, ``peers`` (a node's state) and ``replay``
(its retention log). Each asks the node once and prints text, or JSON with ``--json``.

``**conn`` is what :func:`~.app.broker_option` and :func:`~.app.connection_options` parsed,
passed on to :func:`~.app.connect` as is."""

from __future__ import annotations

import json
from typing import Any

import click

from .app import broker_option, cli, connect, connection_options
from .format import (
    format_message_json,
    format_message_text,
    format_peers,
    format_routes,
)
from .status_text import format_status


@cli.command()
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="Print the raw status as JSON.")
@connection_options()
def status(as_json: bool, **conn: Any) -> None:
    """Show a node's identity, endpoints, counters and subscriptions.

    With security on, only a client key with "monitor = true" may read it."""
    with connect(**conn) as client:
        st = client.status()
    click.echo(json.dumps(st, indent=2) if as_json else format_status(st))


@cli.command()
@click.argument("pattern", required=False)
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="Print the routes as JSON.")
@connection_options()
def routes(pattern: str | None, as_json: bool, **conn: Any) -> None:
    """Show the node's interest table: pattern, origin broker, path, next-hop link.

    With PATTERN, only routes whose pattern overlaps it. With security on, only a client
    key with "monitor = true" may read it."""
    with connect(**conn) as client:
        table = client.routes(pattern)
    click.echo(json.dumps(table, indent=2) if as_json else format_routes(table))


@cli.command()
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="A JSON list of peer objects.")
@connection_options()
def peers(as_json: bool, **conn: Any) -> None:
    """List the node's peers: how each was found (mdns, config, inbound) and link state.

    With security on, only a client key with "monitor = true" may read them."""
    with connect(**conn) as client:
        table = client.peers()
    click.echo(json.dumps(table, indent=2) if as_json else format_peers(table))


@cli.command()
@click.argument("pattern", default=">")
@broker_option()
@click.option(
    "--from",
    "start",
    type=click.IntRange(min=0),
    default=None,
    help="First sequence [default: the oldest retained].",
)
@click.option(
    "--to",
    "end",
    type=click.IntRange(min=0),
    default=None,
    help="Stop before this sequence [default: the newest + 1].",
)
@click.option("--limit", type=click.IntRange(min=1), default=100_000, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (with log_seq).")
@connection_options()
def replay(
    pattern: str,
    start: int | None,
    end: int | None,
    limit: int,
    as_json: bool,
    **conn: Any,
) -> None:
    """Print messages of the node's retention log matching PATTERN, by sequence range."""
    from zbroker.topics import validate_pattern

    validate_pattern(pattern)
    if start is not None and end is not None and start > end:
        raise click.UsageError(f"--from {start} is after --to {end}: nothing to replay")
    with connect(**conn) as client:
        first, last = client.log_range()
        msgs = client.read(pattern, first if start is None else start, end, limit)
    for msg in msgs:
        if as_json:
            click.echo(format_message_json(msg, log_seq=msg.log_seq))
        else:
            click.echo(f"{msg.log_seq} {format_message_text(msg)}")
    click.echo(f"{len(msgs)} message(s); log holds {first}..{last}", err=True)
