"""``zbroker simulate --compare``: one topology under direct and topic-host routing.

Each mode builds the topology afresh (same seed: same nodes, links, subscriptions and
publications), converges and publishes, then reports per node the interest entries held
and the advertisement frames sent, per link the messages carried, and the hops per
delivery — the figures that tell what a hosted branch saves (entries and adverts on the
nodes that are not hosts) and what it costs (hops through the hosts).

Per mode also the convergence after the subscriptions are placed (virtual milliseconds
until the last advertisement arrived, the simulator events processed until the network
was quiet, the rounds of advertisement — the longest chain of frames each sent because of
the one before — and the wall-clock seconds the simulator took), and the memory of the
nodes' interest tables, measured as a deep size: ``sys.getsizeof`` of every object
reachable from a node's table (:class:`~zbroker.routing.table.InterestTable`), each
counted once per node, summed over the nodes. A deep size is exact for the tables and
costs no tracing while the simulation runs (tracemalloc slowed the 200-node direct run
severalfold); it does not count the allocator's own overhead. It moves by a few hundredths
of a percent between processes: string hashing is randomized per process, and the order
in which sets are iterated changes the order of table updates, hence how dicts grew.
Everything else but the wall-clock seconds is deterministic for a topology and seed.
"""

from __future__ import annotations

import gc
import sys
import time
from collections import Counter
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

from .errors import ConfigError
from .sim import Network
from .simulate import _build
from .topics import validate_pattern

__all__ = ["MEMORY_METHOD", "MODES", "compare_modes", "deep_size", "format_modes", "parse_hosts"]

MODES = ("direct", "hosted", "flood")

#: what the ``table_bytes`` figures are (printed with them)
MEMORY_METHOD = (
    "deep size (sys.getsizeof of every object reachable from a node's interest table, "
    "once per node)"
)

# reachable but not the table's: classes, modules and code are shared by the process
_NOT_DATA = (type, ModuleType, FunctionType, BuiltinFunctionType, MethodType)


def parse_hosts(specs: tuple[str, ...], nodes: set[str] | None = None) -> dict[str, list[str]]:
    """``PATTERN=NODE[,NODE...]`` options to {branch: host nodes}."""
    out: dict[str, list[str]] = {}
    for spec in specs:
        pattern, sep, names = spec.partition("=")
        if not sep or not names:
            raise ConfigError(f"--host {spec!r}: write PATTERN=NODE[,NODE...]")
        try:
            validate_pattern(pattern)
        except ValueError as exc:
            raise ConfigError(f"--host {spec!r}: {exc}") from exc
        ids = [n for n in names.split(",") if n]
        if nodes is not None:
            for n in ids:
                if n not in nodes:
                    raise ConfigError(f"--host {spec!r}: no node {n!r} in the topology")
        out.setdefault(pattern, []).extend(ids)
    return out


def _run(
    topology: dict[str, Any],
    hosts: dict[str, list[str]],
    hosting: bool,
    flood: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One mode: ``hosting`` False runs the same network without hosts (direct routing);
    the nodes named in ``hosts`` are left out of the non-host figures either way;
    ``flood``: branches every node floods."""
    t0 = time.perf_counter()
    net, subs, pubs = _build(topology)
    for branch, ids in hosts.items():
        for n in ids:
            if n not in net.nodes:
                raise ConfigError(f"--host {branch}={n}: no node {n!r} in the topology")
            if hosting:
                net.host(n, branch)
    for n in net.nodes:
        for branch in flood:
            net.host(n, branch, flood=True)
    net.run()
    converged = _converge(net, subs)
    host_ids = {n for ids in hosts.values() for n in ids}
    entries = {n: node.engine.entry_count() for n, node in net.nodes.items()}
    t_mem, memory = time.perf_counter(), _memory(net, entries, host_ids)
    t0 += time.perf_counter() - t_mem  # (wall seconds: the simulation's, not the measuring)
    adverts = {n: node.engine.adverts_sent for n, node in net.nodes.items()}
    expected = 0
    for node_id, topic in pubs:
        net.publish(node_id, topic)
        expected += len(net.expected_deliveries(node_id, topic))
        net.run()
    per_link: Counter[str] = Counter()
    for (_m, link, _way), count in net.stats.crossings.items():
        per_link[link] += count
    per_msg = Counter((d.node, d.subscriber, d.msg_id) for d in net.deliveries)
    hops = [d.hops for d in net.deliveries]
    others = [entries[n] for n in net.nodes if n not in host_ids]
    links = [per_link.get(name, 0) for name in net.links]
    return {
        "interest_entries": sum(entries.values()),
        "entries_non_host_total": sum(others),
        "entries_non_host_mean": sum(others) / len(others) if others else 0.0,
        "entries_non_host_max": max(others, default=0),
        "entries_host_max": max((entries[n] for n in host_ids), default=0),
        **memory,
        **converged,
        "advert_frames": sum(adverts.values()),
        "adverts_per_node_max": max(adverts.values(), default=0),
        "message_frames": sum(links),
        "msgs_per_link_mean": sum(links) / len(links) if links else 0.0,
        "msgs_per_link_max": max(links, default=0),
        "deliveries": len(net.deliveries),
        "expected": expected,
        "duplicates": sum(n - 1 for n in per_msg.values() if n > 1),
        "lost": max(0, expected - len(per_msg)),
        "mean_hops": sum(hops) / len(hops) if hops else 0.0,
        "max_hops": max(hops, default=0),
        "wall_seconds": round(time.perf_counter() - t0, 2),
    }


def _converge(net: Network, subs: list[tuple[str, str]]) -> dict[str, Any]:
    """Place the subscriptions and run until the network is quiet: how long that took,
    in virtual time, simulator events, rounds of advertisement and wall-clock seconds."""
    net.stats.advert_rounds = 0
    events, start, t0 = net.stats.events, net.now, time.perf_counter()
    last = net.stats.last_advert_at
    for node_id, pattern in subs:
        net.subscribe(node_id, pattern)
    net.run()
    wall = time.perf_counter() - t0
    heard = net.stats.last_advert_at if net.stats.last_advert_at != last else start
    return {
        "convergence_virtual_ms": round((heard - start) * 1000.0, 3),
        "convergence_events": net.stats.events - events,
        "convergence_rounds": net.stats.advert_rounds,
        "convergence_wall_seconds": round(wall, 2),
    }


def _memory(net: Network, entries: dict[str, int], host_ids: set[str]) -> dict[str, Any]:
    """The bytes of the nodes' interest tables (:data:`MEMORY_METHOD`)."""
    size = {n: deep_size(node.engine._table) for n, node in net.nodes.items()}
    others = [size[n] for n in net.nodes if n not in host_ids]
    return {
        "table_bytes": sum(size.values()),
        "table_bytes_non_host_mean": sum(others) / len(others) if others else 0.0,
        "table_bytes_node_max": max(size.values(), default=0),
        "bytes_per_entry": sum(size.values()) / max(1, sum(entries.values())),
    }


def deep_size(root: object) -> int:
    """Bytes of ``root`` and of everything reachable from it, each object once
    (``sys.getsizeof``; classes, modules and functions are not counted or followed)."""
    seen: set[int] = set()
    total = 0
    todo: list[Any] = [root]
    getsizeof = sys.getsizeof
    while todo:
        fresh = []
        for obj in todo:
            key = id(obj)
            if key in seen or isinstance(obj, _NOT_DATA):
                continue
            seen.add(key)
            fresh.append(obj)
        total += sum(map(getsizeof, fresh))
        todo = gc.get_referents(*fresh)
        for obj in fresh:
            if isinstance(obj, dict):
                todo.extend(obj)  # (a dict of str keys does not report its keys to gc)
    return total


def compare_modes(
    topology: dict[str, Any], hosts: dict[str, list[str]], flood: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The figures of each mode (direct; hosted; with ``flood``, those branches flooded
    on every node), and the ratio direct / hosted of the entries held on the nodes that
    are not hosts."""
    if not hosts:
        raise ConfigError("--compare needs at least one --host PATTERN=NODE[,NODE...]")
    for branch in flood:
        try:
            validate_pattern(branch)
        except ValueError as exc:
            raise ConfigError(f"--flood {branch!r}: {exc}") from exc
    out: dict[str, Any] = {"hosts": hosts, "flooded": list(flood)}
    out["direct"] = _run(topology, hosts, False)
    out["hosted"] = _run(topology, hosts, True)
    if flood:
        out["flood"] = _run(topology, hosts, False, flood)
    hosted = out["hosted"]["entries_non_host_total"]
    out["non_host_entries_ratio"] = (
        round(out["direct"]["entries_non_host_total"] / hosted, 2) if hosted else None
    )
    return out


def format_modes(result: dict[str, Any]) -> str:
    """The figures of :func:`compare_modes`, one row each, one column per mode."""
    hosts = "; ".join(f"{b} on {', '.join(ids)}" for b, ids in result["hosts"].items())
    modes = [m for m in MODES if isinstance(result.get(m), dict)]
    lines = [f"hosted branches: {hosts}"]
    if result.get("flooded"):
        lines.append(f"flooded branches (flood column): {', '.join(result['flooded'])}")
    lines.append(f"{'':30}" + "".join(f"{m:>16}" for m in modes))
    for key in result["direct"]:
        cells = [result[m][key] for m in modes]
        row = "".join(f"{c:>16,.2f}" if isinstance(c, float) else f"{c:>16,}" for c in cells)
        lines.append(f"{key.replace('_', ' '):30}{row}")
    lines.append(f"non-host entries, direct / hosted: {result['non_host_entries_ratio']}")
    lines.append(f"table bytes: {MEMORY_METHOD}")
    lines.append(
        "convergence: after the subscriptions are placed, until the network is quiet "
        "(virtual ms to the last advertisement; simulator events; rounds = longest chain of "
        "advertisements; wall = this machine's seconds)"
    )
    return "\n".join(lines)
