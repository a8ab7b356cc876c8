"""The ``zbroker`` command: start a node, publish, subscribe, inspect.

The entry point (``zbroker.cli.main:main``). Each command group lives in its own module
and registers itself on the group :data:`cli` when imported here:

* :mod:`.node` — ``start``, ``keygen``;
* :mod:`.pubsub` — ``pub``, ``sub``;
* :mod:`.inspection` — ``status``, ``routes``, ``peers``, ``replay``;
* :mod:`.simulate` — ``simulate``;
* :mod:`.queues` — ``queues``, ``delete-durable``;
* :mod:`.events` — ``events``;
* :mod:`.state` — ``set``, ``remove``, ``fetch``, ``topics`` (topics with state).

Every option of ``start`` can also come from an environment variable (``ZBROKER_PORT``, ...)
and from the TOML config file; precedence is flag > environment > file > default.
User mistakes (bad topic, unreachable node, bad config) print one line and exit non-zero.
"""

from __future__ import annotations

# imported for their effect: each module registers its commands on `cli`
from . import events, inspection, node, pubsub, queues, simulate, state  # noqa: F401
from .app import DEFAULT_BROKER, cli
from .signals import SignalStop

__all__ = ["DEFAULT_BROKER", "SignalStop", "cli", "main"]


def main() -> None:
    cli(prog_name="zbroker")


if __name__ == "__main__":
    main()
