"""The ``zbroker`` command group and what its commands share: error handling, the
``--broker`` and connection options, and the client they build.

Every command module registers its commands on :data:`cli`; :mod:`.main` imports them all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import click

from zbroker import Client, ZBrokerError

from .signals import SignalStop

DEFAULT_BROKER = "tcp://127.0.0.1:7100"


class _Group(click.Group):
    """Turns zbroker errors into one clear line and exit status 1 (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ZBrokerError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Group, context_settings={"auto_envvar_prefix": "ZBROKER"})
# the switch reads no ZBROKER_VERSION: a variable of that name (a deployment's version, say)
# must not turn every command into printing the version, or into a usage error
@click.version_option(package_name="zbroker", allow_from_autoenv=False)
def cli() -> None:
    """zbroker: a peer-to-peer message broker on ZeroMQ."""


F = TypeVar("F", bound=Callable[..., Any])


def broker_option() -> Callable[[F], F]:
    """``--broker/-b``: the node a client command talks to."""
    return click.option(
        "--broker",
        "-b",
        default=DEFAULT_BROKER,
        show_default=True,
        envvar="ZBROKER_BROKER",
        help="The node's well-known address.",
    )


def connection_options() -> Callable[[F], F]:
    """``--timeout``, ``--interface``, ``--keys``, ``--server-key``: how a client command
    reaches the node (the arguments of :func:`connect`)."""
    timeout = click.option(
        "--timeout",
        default=5.0,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        help="Seconds to wait for the node.",
    )
    interface = click.option(
        "--interface",
        "interfaces",
        multiple=True,
        envvar="ZBROKER_INTERFACE",
        help="With --broker zeroconf://GROUP: address of an interface to browse on "
        "(repeatable) [default: all].",
    )
    keys = click.option(
        "--keys",
        envvar="ZBROKER_KEYS",
        default=None,
        help="Security: this client's secret key file (NAME.key_secret from zbroker keygen).",
    )
    server_key = click.option(
        "--server-key",
        envvar="ZBROKER_SERVER_KEY",
        default=None,
        help="Security: the node's public key (Z85 text or its node.key file).",
    )

    def all_of(f: F) -> F:
        return timeout(interface(keys(server_key(f))))

    return all_of


def connect(
    broker: str,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None = None,
    server_key: str | None = None,
    **kw: Any,
) -> Client:
    """A client from the options of :func:`broker_option` and :func:`connection_options`."""
    return Client(
        broker,
        timeout=timeout,
        interfaces=list(interfaces) or None,
        keys=keys,
        server_key=server_key,
        **kw,
    )


def connect_or_stop(signals: SignalStop, **conn: Any) -> Client | None:
    """:func:`connect` for a foreground command (``sub``, ``events``): None if a signal
    asks it to stop first. The constructor waits up to ``--timeout`` for a node that does
    not answer, and Ctrl-C waited with it; so it runs on a thread of its own while this
    one watches ``signals`` (a signal only records itself: see :class:`SignalStop`)."""
    made: list[Client | BaseException] = []

    def run() -> None:
        try:
            made.append(connect(**conn))
        except BaseException as exc:
            made.append(exc)

    threading.Thread(target=run, name="zbroker-connect", daemon=True).start()
    while not made:
        if signals.wait(0.05):
            if made and isinstance(made[0], Client):
                made[0].close()  # (it answered just then)
            return None  # (a constructor still waiting dies with the process)
    if isinstance(made[0], BaseException):
        raise made[0]
    return made[0]
