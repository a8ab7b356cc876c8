"""Node configuration: frozen dataclasses, loaded from TOML and validated.

* :mod:`.node` — :class:`NodeConfig`, its defaults and checks per table;
* :mod:`.link` — :class:`LinkConfig` (one dialed link) and :func:`peer_link`;
* :mod:`.advisories` — :class:`AdvisoryConfig` (``[advisories]``);
* :mod:`.toml` — :func:`load_config`: a TOML file to a NodeConfig;
* :mod:`.checks` — value checks shared by both (broker IDs, ranges, patterns, URIs).

Every error names where the bad value came from (file and key, or the keyword/flag) and the
value itself; unknown keys are errors, so a typo never silently falls back to a default.

File layout (all keys optional)::

    [node]
    id = "alpha"                  # broker ID; generated once and persisted if absent
    host = "127.0.0.1"            # interface to bind
    port = 7100                   # well-known port; PORT+1 publish, PORT+2 deliver; 0 = any
    data_dir = "/var/lib/zbroker" # identity and store
    log_level = "info"

    group = "default"             # only nodes of the same network group link

    [limits]
    max_frame_bytes = 1048576     # larger frames are counted and dropped (links: +64 KiB)
    hwm = 100000                  # socket high-water marks, messages

    [discovery]                   # LAN discovery over mDNS (zbroker start: on unless the
                                  # host is a loopback address)
    enabled = true
    interfaces = ["192.168.1.5"]  # default: the bound host address, or every interface
                                  # when the node binds 0.0.0.0
    [discovery.link_defaults]     # options of links made to discovered peers
    ttl = 8

    [[retain]]                    # keep matching messages in the retention log
    pattern = "TRADES.>"
    max_msgs = 1000000            # 0 = unbounded; also max_bytes, max_age (seconds)

    [[queue]]                     # routing policy of a queue group (config/queues.py)
    group = "workers"
    policy = "round_robin"        # local_first (default) | round_robin | weighted

    [[link]]                      # one table per link this node dials (see LinkConfig)
    name = "to-b"
    uri = "tcp://10.0.0.2:7100"
    duplex = true
    peer = "beta"                 # broker ID expected there (required with security on)

    [security]                    # CurveZMQ (see zbroker/security.py); off by default
    enabled = true
    key_dir = "/var/lib/zbroker"  # holds node.key + node.key_secret (default: data_dir)
    allowlist = "/etc/zbroker/nodes"  # dir of BROKER_ID.key files, or "ID KEY" lines
    clients = "/etc/zbroker/clients.toml"  # client keys and permissions (or a table)

    [monitor]                     # metrics, JSON API and network map over HTTP; off by
    listen = "127.0.0.1:8222"     # default (with security on, only an explicit listen)
    interval = 1.0                # seconds between the snapshots it serves

Precedence where several sources set a value: command-line flag > environment variable
(``ZBROKER_PORT`` and the others of ``zbroker start``'s options, README "Configuration";
not every key of the file has one) > config file > default. :func:`load_config` reads a file;
:meth:`NodeConfig.replace` applies overrides with the same validation.
"""

from __future__ import annotations

from ..store import RetainRule
from .advisories import AdvisoryConfig
from .checks import check_patterns, validate_broker_id
from .link import LinkConfig, peer_link
from .monitor import MonitorConfig
from .node import LOG_LEVELS, NodeConfig, default_data_dir
from .queues import QueueRule
from .toml import config_from_mapping, load_config

__all__ = [
    "LOG_LEVELS",
    "AdvisoryConfig",
    "LinkConfig",
    "MonitorConfig",
    "NodeConfig",
    "QueueRule",
    "RetainRule",
    "check_patterns",
    "config_from_mapping",
    "default_data_dir",
    "load_config",
    "peer_link",
    "validate_broker_id",
]
