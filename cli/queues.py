"""``zbroker queues``: a node's work queues — queue groups (members per node as the
network advertised them) and shared durable subscriptions — with what is stored, in
flight, delivered, redelivered and redistributed (moved between nodes with the durable's
home: features/durables/moves.py), dropped and (a group's messages this node) lost.
Text, or JSON with ``--json`` (the status section ``queues`` as is). ``zbroker
delete-durable``: a durable subscription deleted, with what it stored."""

from __future__ import annotations

import json
from typing import Any

import click

from zbroker import NoSuchDurable, PermissionDenied

from .app import broker_option, cli, connect, connection_options
from .format import format_table


@cli.command()
@broker_option()
@click.option("--json", "as_json", is_flag=True, help="Print the queues as JSON.")
@connection_options()
def queues(as_json: bool, **conn: Any) -> None:
    """Show queue groups and shared durable subscriptions: members per node, stored, in
    flight, delivered, redelivered, redistributed.

    They come from the node's status: with security on, only a client key with
    "monitor = true" may read them."""
    with connect(**conn) as client:
        try:
            rows = client.status().get("queues", [])
        except PermissionDenied as exc:  # the node names what it was asked: its status
            raise PermissionDenied(f"{exc} (zbroker queues reads the node's status)") from None
    click.echo(json.dumps(rows, indent=2) if as_json else format_queues(rows))


@cli.command("delete-durable")
@click.argument("name")
@click.option(
    "--missing-ok",
    is_flag=True,
    help="A name no node holds is not an error (nothing is deleted).",
)
@broker_option()
@connection_options()
def delete_durable(name: str, missing_ok: bool, **conn: Any) -> None:
    """Delete durable subscription NAME and the messages it stored (to change its
    selector or pattern, or to drop what piled up). Its home node deletes it, wherever
    the client is connected; a consumer still attached gets no more messages.

    A name no node holds is an error (exit 1), unless --missing-ok."""
    with connect(**conn) as client:
        try:
            deleted = client.delete_durable(name, missing_ok=False)
        except NoSuchDurable as exc:
            if not missing_ok:
                raise click.ClickException(str(exc)) from None
            click.echo(f"no durable {name}: nothing deleted")
            return
    click.echo(f"deleted durable {name}: {deleted} stored message(s) went with it")


def format_queues(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "no queues"
    return format_table(
        [
            "kind",
            "name",
            "pattern",
            "policy",
            "members",
            "stored",
            "in flight",
            "delivered",
            "redelivered",
            "redistributed",
            "dropped",
            "lost",
        ],
        [
            [
                "group" if r["kind"] == "group" else "shared durable",
                r.get("group") or _durable_name(r),
                r["pattern"],
                r.get("policy", "-"),
                ", ".join(f"{node}:{n}" for node, n in sorted(r["members"].items())) or "-",
                r.get("stored", r.get("pending", "-")),
                r["in_flight"],
                r["delivered"],
                r.get("redelivered", "-"),
                r.get("redistributed", "-")
                if "moving_to" not in r
                else f"{r.get('redistributed', 0)} (moving to {r['moving_to']})",
                r.get("dropped", "-"),
                r.get("lost", "-"),
            ]
            for r in rows
        ],
    )


def _durable_name(r: dict[str, Any]) -> str:
    """A shared durable's name, with where it lives when that is not this node (and the
    other nodes holding one of that name, which should not last)."""
    name = r["name"] if r.get("home") == r.get("node") else f"{r['name']} (home {r['home']})"
    also = r.get("also_held_on")
    return f"{name} (also on {', '.join(also)})" if also else name
