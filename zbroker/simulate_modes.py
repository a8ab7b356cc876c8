"""``zbroker simulate --compare``: one topology under direct and topic-host routing.

Each mode builds the topology afresh (same seed: same nodes, links, subscriptions and
publications), converges and publishes, then reports per node the interest entries held
and the advertisement frames sent, per link the messages carried, and the hops per
delivery — the figures that tell what a hosted branch saves (entries and adverts on the
nodes that are not hosts) and what it costs (hops through the hosts).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from .errors import ConfigError
from .simulate import _build
from .topics import validate_pattern

__all__ = ["MODES", "compare_modes", "format_modes", "parse_hosts"]

MODES = ("direct", "hosted", "flood")


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
    for node_id, pattern in subs:
        net.subscribe(node_id, pattern)
    net.run()
    host_ids = {n for ids in hosts.values() for n in ids}
    entries = {n: node.engine.entry_count() for n, node in net.nodes.items()}
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
    return "\n".join(lines)
