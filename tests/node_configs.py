"""The TOML of nodes that tests start as ``zbroker start`` processes.

One ``[node]`` table on 127.0.0.1 and the fast link timings the multi-node process tests
share: heartbeats every 0.2 s, a peer declared dead after 1 s, redials from 0.1 s up to
0.5 s, so that a test which kills a node and starts it again is done in seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the link timings of LinkConfig (seconds) that every multi-node test uses
FAST_LINK: dict[str, Any] = {
    "heartbeat_interval": 0.2,
    "heartbeat_timeout": 1.0,
    "reconnect_initial_delay": 0.1,
    "reconnect_max_delay": 0.5,
}


def node_toml(id: str, port: int, data: Path | str, tables: str = "") -> str:
    """A node named ``id`` serving 127.0.0.1:``port`` with its data under ``data``;
    ``tables`` is the rest of the file (``[[link]]``, ``[[retain]]`` ... tables)."""
    return f"""
[node]
id = "{id}"
host = "127.0.0.1"
port = {port}
data_dir = "{data}"
{tables}
"""


def link_toml(
    name: str,
    port: int,
    *,
    replicate: list[str] | None = None,
    reconnect_initial_delay: float = FAST_LINK["reconnect_initial_delay"],
) -> str:
    """A ``[[link]]`` table dialling 127.0.0.1:``port`` with the fast timings; with
    ``replicate``, the link pushes those patterns whatever the interest."""
    quoted = ", ".join(f'"{p}"' for p in replicate or ())
    pushed = "" if replicate is None else f"replicate = [{quoted}]\n"
    return f"""
[[link]]
name = "{name}"
uri = "tcp://127.0.0.1:{port}"
{pushed}heartbeat_interval = {FAST_LINK["heartbeat_interval"]}
heartbeat_timeout = {FAST_LINK["heartbeat_timeout"]}
reconnect_initial_delay = {reconnect_initial_delay}
reconnect_max_delay = {FAST_LINK["reconnect_max_delay"]}
"""
