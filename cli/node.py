"""The node's own commands: ``start`` (run a node in the foreground) and ``keygen``.

``start`` resolves its configuration as flag > environment variable (``ZBROKER_PORT``, ...)
> config file > default; see :func:`start_config`.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import signal
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from zbroker import Broker, NodeConfig, load_config, tune_gc, tune_malloc
from zbroker.config import LOG_LEVELS, default_data_dir, peer_link, validate_broker_id
from zbroker.errors import ConfigError

from .app import cli
from .signals import SignalStop

log = logging.getLogger("zbroker.cli")


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
@click.option(
    "--monitor",
    envvar="ZBROKER_MONITOR",
    metavar="HOST:PORT",
    help="Serve metrics, a JSON API and the network map over HTTP here "
    "(e.g. 127.0.0.1:8222) [default: off].",
)
@click.option(
    "--local",
    "local_branches",
    multiple=True,
    metavar="PATTERN",
    help="A local branch: topics matching PATTERN never leave this node, and interest in "
    "them is never advertised (repeatable; replaces [routing] local).",
)
@click.option(
    "--host-topic",
    "host_branches",
    multiple=True,
    metavar="PATTERN",
    help="Host this branch (topic-host routing): other nodes send its publications here "
    "and advertise their interest in it only toward its hosts (repeatable; replaces "
    "[[host]]).",
)
@click.option(
    "--flood",
    "flood_branches",
    multiple=True,
    metavar="PATTERN",
    help="Flood this branch: its publications go to every node and interest in it is "
    "never advertised (repeatable; replaces [[flood]]).",
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
    """Run a broker node in the foreground until Ctrl-C or SIGTERM (SIGHUP reloads the
    allowlist and client permissions)."""
    config = start_config(ctx, config_file, peers, interfaces, flags)
    logging.basicConfig(
        level=config.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not config.security and (config.allowlist is not None or config.clients is not None):
        # (not an error: turning security off for a while keeps its files in the config)
        log.warning(
            "security is off: the allowlist and client permissions given are not read, "
            "and any node or client may connect (--secure turns it on)"
        )
    signals = SignalStop(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    broker = Broker(config).start()
    # this process exists to run the node: fit the garbage collector and the C allocator
    # to it (zbroker.process)
    tune_gc()
    tune_malloc()
    click.echo(
        f"zbroker node {broker.broker_id} (incarnation {broker.incarnation}) ready at "
        f"{broker.endpoint}",
        err=True,
    )
    monitor = broker.status().get("monitor")
    if monitor:
        click.echo(f"zbroker monitor at {monitor['url']}", err=True)
    try:
        while broker.running:  # (its loop ends by itself only when it fails)
            if not signals.wait(1.0):
                continue
            if signals.received != [signal.SIGHUP]:
                break
            signals.received.clear()
            _reload(broker, lambda: start_config(ctx, config_file, peers, interfaces, flags))
    finally:
        broker.stop()
        click.echo("zbroker node stopped", err=True)
    if broker.failure is not None:
        # a process that stays up with a dead node would look served to its supervisor
        raise click.ClickException(f"the node's loop failed: {broker.failure}")


def _reload(broker: Broker, read_config: Callable[[], NodeConfig]) -> None:
    """SIGHUP: the allowlist and client permissions again, from the config as ``start``
    reads it now (a bad file is said and changes nothing)."""
    if not broker.config.security:
        click.echo("SIGHUP: security is off: nothing to reload", err=True)
        return
    try:
        result = broker.reload_security(read_config())
    except (ConfigError, OSError, ValueError) as exc:
        click.echo(f"SIGHUP: reload refused, the previous rules stay: {exc}", err=True)
        return
    click.echo(f"SIGHUP: security reloaded: {result}", err=True)


def start_config(
    ctx: click.Context,
    config_file: Path | None,
    peers: tuple[str, ...],
    interfaces: tuple[str, ...],
    flags: dict[str, Any],
) -> NodeConfig:
    """The node's configuration from ``start``'s sources: a flag or environment variable
    wins over the config file, which wins over the default (without a file, every option
    with a value applies)."""
    config = load_config(config_file) if config_file else NodeConfig()
    file_keys = _file_keys(config_file)
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    overrides = {
        name: value
        for name, value in flags.items()
        if ctx.get_parameter_source(name) in given or (config_file is None and value is not None)
    }
    # what an error names as the values' source: a variable is not a flag the user typed
    sources = {ctx.get_parameter_source(name) for name in overrides} & set(given)
    source = (
        "environment (ZBROKER_*)"
        if sources == {ParameterSource.ENVIRONMENT}
        else "command line or environment"
        if ParameterSource.ENVIRONMENT in sources
        else "command line"
    )
    if peers:
        overrides["links"] = config.links + tuple(peer_link(p) for p in peers)
    if interfaces:
        overrides["interfaces"] = interfaces
    if "monitor" in overrides:  # the address; the file's other [monitor] keys stay
        listen = overrides.pop("monitor")
        overrides["monitor"] = dataclasses.replace(config.monitor, listen=listen, source=source)
    config = config.replace(source=source, **overrides)
    if ctx.get_parameter_source("discovery") not in given and "discovery" not in file_keys:
        # a node reachable only on loopback has nobody to discover: mDNS stays off then
        config = config.replace(discovery=not _is_loopback(config.host))
    return config


def _is_loopback(host: str) -> bool:
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
    data = tomllib.loads(config_file.read_text("utf-8"))
    return {"discovery"} if "enabled" in data.get("discovery", {}) else set()


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
    from zbroker.security import generate_keys, load_key_pair

    validate_broker_id(name, "--name")
    directory = out or data_dir or default_data_dir(port)
    secret, created = generate_keys(directory, name)
    public, _ = load_key_pair(secret)
    click.echo(f"{'created' if created else 'kept existing'} {secret}", err=True)
    click.echo(public.decode())
