"""The ``zbroker`` command: start a node, publish, subscribe, inspect.

Every option of ``start`` can also come from an environment variable (``ZBROKER_PORT``, ...)
and from the TOML config file; precedence is flag > environment > file > default.
User mistakes (bad topic, unreachable node, bad config) print one line and exit non-zero.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from zbroker import Broker, Client, NodeConfig, ZBrokerError, load_config, tune_gc
from zbroker.config import LOG_LEVELS, peer_link

from .format import (
    format_message_json,
    format_message_text,
    format_peers,
    format_routes,
    format_simulation,
    format_status,
)

DEFAULT_BROKER = "tcp://127.0.0.1:7100"


class _Group(click.Group):
    """Turns zbroker errors into one clear line and exit status 1 (no traceback)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ZBrokerError as exc:
            raise click.ClickException(str(exc)) from exc


@click.group(cls=_Group, context_settings={"auto_envvar_prefix": "ZBROKER"})
@click.version_option(package_name="zbroker")
def cli() -> None:
    """zbroker: a peer-to-peer message broker on ZeroMQ."""


F = TypeVar("F", bound=Callable[..., Any])


def _broker_option() -> Callable[[F], F]:
    return click.option(
        "--broker",
        "-b",
        default=DEFAULT_BROKER,
        show_default=True,
        envvar="ZBROKER_BROKER",
        help="The node's well-known address.",
    )


def _timeout_option() -> Callable[[F], F]:
    timeout = click.option(
        "--timeout",
        default=5.0,
        show_default=True,
        type=float,
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


def _client(
    broker: str,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None = None,
    server_key: str | None = None,
    **kw: Any,
) -> Client:
    return Client(
        broker,
        timeout=timeout,
        interfaces=list(interfaces) or None,
        keys=keys,
        server_key=server_key,
        **kw,
    )


@cli.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="ZBROKER_CONFIG",
    help="TOML config file.",
)
@click.option(
    "--id",
    "broker_id",
    envvar="ZBROKER_ID",
    help="Broker ID (default: generated once, kept in the data dir).",
)
@click.option(
    "--host", envvar="ZBROKER_HOST", default="127.0.0.1", show_default=True, help="Address to bind."
)
@click.option(
    "--port",
    envvar="ZBROKER_PORT",
    type=int,
    default=7100,
    show_default=True,
    help="Well-known port; PORT+1 takes publishes, PORT+2 delivers.",
)
@click.option(
    "--data-dir",
    envvar="ZBROKER_DATA_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Data directory [default: ~/.local/share/zbroker/node-PORT].",
)
@click.option(
    "--log-level",
    envvar="ZBROKER_LOG_LEVEL",
    type=click.Choice(LOG_LEVELS),
    default="info",
    show_default=True,
)
@click.option(
    "--group",
    envvar="ZBROKER_GROUP",
    default="default",
    show_default=True,
    help="Network group: only nodes of the same group link.",
)
@click.option(
    "--peer",
    "peers",
    multiple=True,
    envvar="ZBROKER_PEER",
    help="Dial a duplex link to this node ([BROKER_ID@]tcp://HOST:PORT; repeatable; "
    "with --secure the BROKER_ID@ is required).",
)
@click.option(
    "--secure/--no-secure",
    "security",
    default=None,
    envvar="ZBROKER_SECURE",
    help="CurveZMQ on every network socket (needs keys: zbroker keygen) [default: off].",
)
@click.option(
    "--key-dir",
    envvar="ZBROKER_KEY_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where node.key/node.key_secret are [default: the data dir].",
)
@click.option(
    "--allowlist",
    envvar="ZBROKER_ALLOWLIST",
    type=click.Path(path_type=Path),
    help="Peer nodes' public keys: a dir of BROKER_ID.key files, or 'ID KEY' lines.",
)
@click.option(
    "--clients",
    envvar="ZBROKER_CLIENTS",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Client keys and topic permissions (TOML).",
)
@click.option(
    "--discovery/--no-discovery",
    default=None,
    envvar="ZBROKER_DISCOVERY",
    help="Find and link nodes of the same group on the LAN by mDNS "
    "[default: on when --host is not a loopback address].",
)
@click.option(
    "--interface",
    "interfaces",
    multiple=True,
    envvar="ZBROKER_INTERFACE",
    help="Address of an interface to discover on (repeatable; IPv4 or IPv6) "
    "[default: the --host address, or every interface for 0.0.0.0].",
)
@click.pass_context
def start(
    ctx: click.Context,
    /,
    config_file: Path | None,
    peers: tuple[str, ...],
    interfaces: tuple[str, ...],
    **flags: Any,
) -> None:
    """Run a broker node in the foreground until Ctrl-C or SIGTERM."""
    config = load_config(config_file) if config_file else NodeConfig()
    file_keys = _file_keys(config_file)
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    overrides = {
        name: value
        for name, value in flags.items()
        if ctx.get_parameter_source(name) in given or (config_file is None and value is not None)
    }
    if peers:
        overrides["links"] = config.links + tuple(peer_link(p) for p in peers)
    if interfaces:
        overrides["interfaces"] = interfaces
    config = config.replace(source="command line", **overrides)
    if ctx.get_parameter_source("discovery") not in given and "discovery" not in file_keys:
        # a node reachable only on loopback has nobody to discover: mDNS stays off then
        config = config.replace(discovery=not _is_loopback(config.host))
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    signals = SignalStop(signal.SIGINT, signal.SIGTERM)
    broker = Broker(config).start()
    # this process exists to run the node: fit the garbage collector to it (zbroker.process)
    tune_gc()
    click.echo(
        f"zbroker node {broker.broker_id} (incarnation {broker.incarnation}) ready at "
        f"{broker.endpoint}",
        err=True,
    )
    try:
        while not signals.wait(3600.0):
            pass
    finally:
        broker.stop()
        click.echo("zbroker node stopped", err=True)


class SignalStop:
    """SIGINT/SIGTERM ask a foreground command to stop.

    The handler only appends to a list. A handler that takes a lock, as
    ``threading.Event.set`` does, can run while the main thread holds that same lock
    inside ``Event.wait`` (Python runs handlers in the main thread between bytecodes), and
    then the process never stops: ``zbroker start`` was seen ignoring SIGTERM that way.
    """

    def __init__(self, *signums: int) -> None:
        self.received: list[int] = []
        for signum in signums:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.received.append(signum)

    def wait(self, timeout: float) -> bool:
        """Sleep up to ``timeout`` seconds; True as soon as (within 0.1 s) a signal came."""
        end = time.monotonic() + timeout
        while not self.received:
            left = end - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.1))
        return True


def _is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _file_keys(config_file: Path | None) -> set[str]:
    """Which NodeConfig fields the config file sets (for the discovery default)."""
    if config_file is None:
        return set()
    import tomllib

    data = tomllib.loads(config_file.read_text("utf-8"))
    return {"discovery"} if "enabled" in data.get("discovery", {}) else set()


def _parse_headers(values: tuple[str, ...]) -> dict[str, Any] | None:
    headers: dict[str, Any] = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--header")
        headers[key] = value
    return headers or None


@cli.command()
@click.argument("topic")
@click.argument("message", required=False, default="")
@_broker_option()
@click.option(
    "--count",
    "-n",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="How many times to publish MESSAGE.",
)
@click.option(
    "--rate",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Messages per second (default: as fast as possible).",
)
@click.option("--header", "-H", "headers", multiple=True, help="Header KEY=VALUE (repeatable).")
@click.option(
    "--persistent", is_flag=True, help="Send as persistent: the node stores it before confirming."
)
@click.option(
    "--confirm",
    is_flag=True,
    help="Wait for the node's confirmation of each (implies --persistent).",
)
@_timeout_option()
def pub(
    topic: str,
    message: str,
    broker: str,
    count: int,
    rate: float | None,
    headers: tuple[str, ...],
    persistent: bool,
    confirm: bool,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None,
    server_key: str | None,
) -> None:
    """Publish MESSAGE on TOPIC (MESSAGE '-' publishes each line of stdin)."""
    hdrs = _parse_headers(headers)
    from zbroker.topics import validate_publish_topic

    validate_publish_topic(topic)

    def payloads() -> Iterator[bytes]:
        if message == "-":
            for line in sys.stdin:
                yield line.rstrip("\n").encode()
        else:
            data = message.encode()
            for _ in range(count):
                yield data

    sent = 0
    confirmed = 0
    futures = []
    with _client(broker, timeout, interfaces, keys, server_key, publish_timeout=timeout) as client:
        start_t = time.monotonic()
        for payload in payloads():
            if rate:
                delay = start_t + sent / rate - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            if persistent or confirm:
                # confirmations are awaited together at the end: the node batches commits
                futures.append(client.publish(topic, payload, headers=hdrs, persistent=True))
            else:
                client.publish(topic, payload, headers=hdrs)
            sent += 1
        for fut in futures:
            try:
                fut.result(timeout)
            except Exception as exc:
                raise click.ClickException(
                    f"{confirmed} of {sent} message(s) confirmed; then: {exc or 'no answer'}"
                ) from exc
            confirmed += 1
    note = f", {confirmed} confirmed stored" if futures else ""
    click.echo(f"published {sent} message(s) to {topic}{note}", err=True)


@cli.command()
@click.argument("patterns", nargs=-1, required=True)
@_broker_option()
@click.option(
    "--count", "-n", type=click.IntRange(min=1), default=None, help="Exit after this many messages."
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option(
    "--durable",
    default=None,
    help="Open (or reattach to) the durable subscription NAME: messages published while "
    "away are delivered on return (one PATTERN only).",
)
@_timeout_option()
def sub(
    patterns: tuple[str, ...],
    broker: str,
    count: int | None,
    as_json: bool,
    durable: str | None,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None,
    server_key: str | None,
) -> None:
    """Print messages matching PATTERN(s) until Ctrl-C (or --count)."""
    if durable is not None and len(patterns) != 1:
        raise click.UsageError("--durable takes exactly one PATTERN")
    from zbroker.topics import validate_pattern

    for p in patterns:
        validate_pattern(p)
    done = threading.Event()
    seen = 0
    lock = threading.Lock()
    fmt = format_message_json if as_json else format_message_text

    def on_message(msg: Any) -> None:
        nonlocal seen
        with lock:
            if done.is_set():
                return
            click.echo(fmt(msg))
            seen += 1
            if count is not None and seen >= count:
                done.set()
                if durable is not None:
                    # detach now: what follows stays stored (unacknowledged) for next time
                    client.detach_durable(durable)

    # Ctrl-C too: a KeyboardInterrupt raised inside Event.wait() can leave the process
    # stuck (seen once in a full test run: SIGINT, no exit within 5 s); the main thread
    # only sleeps and looks at flags here, and the signal only records itself
    signals = SignalStop(signal.SIGTERM, signal.SIGINT)
    with _client(broker, timeout, interfaces, keys, server_key) as client:
        for p in patterns:
            client.subscribe(p, on_message, durable=durable)
        click.echo(f"subscribed to {', '.join(patterns)} on {client.broker_id}", err=True)
        while not done.is_set() and not signals.wait(0.2):
            pass


@cli.command()
@_broker_option()
@click.option("--json", "as_json", is_flag=True, help="Print the raw status as JSON.")
@_timeout_option()
def status(
    broker: str,
    as_json: bool,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None,
    server_key: str | None,
) -> None:
    """Show a node's identity, endpoints, counters and subscriptions."""
    with _client(broker, timeout, interfaces, keys, server_key) as client:
        st = client.status()
    click.echo(json.dumps(st, indent=2) if as_json else format_status(st))


@cli.command()
@click.argument("pattern", default=">")
@_broker_option()
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
@_timeout_option()
def replay(
    pattern: str,
    broker: str,
    start: int | None,
    end: int | None,
    limit: int,
    as_json: bool,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None,
    server_key: str | None,
) -> None:
    """Print messages of the node's retention log matching PATTERN, by sequence range."""
    from zbroker.topics import validate_pattern

    validate_pattern(pattern)
    if start is not None and end is not None and start > end:
        raise click.ClickException(f"--from {start} is after --to {end}: nothing to replay")
    with _client(broker, timeout, interfaces, keys, server_key) as client:
        first, last = client.log_range()
        msgs = client.read(pattern, first if start is None else start, end, limit)
    for msg in msgs:
        if as_json:
            click.echo(format_message_json(msg, log_seq=msg.log_seq))
        else:
            click.echo(f"{msg.log_seq} {format_message_text(msg)}")
    click.echo(f"{len(msgs)} message(s); log holds {first}..{last}", err=True)


@cli.command()
@_broker_option()
@click.option("--json", "as_json", is_flag=True, help="A JSON list of peer objects.")
@_timeout_option()
def peers(
    broker: str,
    as_json: bool,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None,
    server_key: str | None,
) -> None:
    """List the node's peers: how each was found (mdns, config, inbound) and link state."""
    with _client(broker, timeout, interfaces, keys, server_key) as client:
        table = client.peers()
    click.echo(json.dumps(table, indent=2) if as_json else format_peers(table))


@cli.command()
@click.argument("pattern", required=False)
@_broker_option()
@click.option("--json", "as_json", is_flag=True, help="Print the routes as JSON.")
@_timeout_option()
def routes(
    pattern: str | None,
    broker: str,
    as_json: bool,
    timeout: float,
    interfaces: tuple[str, ...],
    keys: str | None,
    server_key: str | None,
) -> None:
    """Show the node's interest table: pattern, origin broker, path, next-hop link.

    With PATTERN, only routes whose pattern overlaps it."""
    with _client(broker, timeout, interfaces, keys, server_key) as client:
        table = client.routes(pattern)
    click.echo(json.dumps(table, indent=2) if as_json else format_routes(table))


@cli.command()
@click.option(
    "--data-dir",
    envvar="ZBROKER_DATA_DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="The node's data directory: writes node.key/node.key_secret there "
    "[default: ~/.local/share/zbroker/node-PORT].",
)
@click.option("--port", envvar="ZBROKER_PORT", type=int, default=7100, show_default=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write NAME.key/NAME.key_secret here instead (a client's keys).",
)
@click.option("--name", default="node", show_default=True, help="Base name of the key files.")
def keygen(data_dir: Path | None, port: int, out: Path | None, name: str) -> None:
    """Create a CurveZMQ key pair unless one exists; print the public key.

    NAME.key (public) goes to other nodes' allowlists or clients' --server-key;
    NAME.key_secret (readable by its owner only) stays where it is."""
    from zbroker.config import default_data_dir, validate_broker_id
    from zbroker.security import generate_keys, load_key_pair

    validate_broker_id(name, "--name")
    directory = out or data_dir or default_data_dir(port)
    secret, created = generate_keys(directory, name)
    public, _ = load_key_pair(secret)
    click.echo(f"{'created' if created else 'kept existing'} {secret}", err=True)
    click.echo(public.decode())


@cli.command()
@click.argument("topology", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def simulate(topology: Path, as_json: bool) -> None:
    """Simulate a network from a TOPOLOGY.toml file and print its figures.

    Convergence time, advertisement frames, messages per link per publish, hops per
    delivery, duplicates delivered (must be 0) and messages lost: plan a network before
    deploying it. Runs the same routing engine as a node, in one process.
    """
    from zbroker.simulate import load_topology, run_simulation

    report = run_simulation(load_topology(topology))
    click.echo(
        json.dumps(report.as_dict(), indent=2) if as_json else format_simulation(report.as_dict())
    )


def main() -> None:
    cli(prog_name="zbroker")


if __name__ == "__main__":
    main()
