"""``zbroker simulate TOPOLOGY --svg FILE``: the simulated network drawn as SVG.

Nodes on a circle (sorted by ID, so the same topology draws the same picture), each link
a line whose width grows with the messages it carried, labelled with the messages per
direction; nodes with local subscriptions are filled. Elements carry data attributes
(``data-node``, ``data-link``, ``data-messages``) like the monitor's live map.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from .sim import Network

__all__ = ["link_messages", "network_svg"]

_SIZE = 800
_R_NODE = 14


def link_messages(net: Network) -> dict[str, Counter[str]]:
    """Messages each link carried, per direction (``"A>B"``)."""
    out: dict[str, Counter[str]] = {name: Counter() for name in net.links}
    for (_, link, direction), frames in net.stats.crossings.items():
        out[link][direction] += frames
    return out


def network_svg(net: Network, report: dict[str, Any] | None = None) -> str:
    ids = sorted(net.nodes)
    n = max(1, len(ids))
    radius = _SIZE / 2 - 80
    pos = {
        node: (
            _SIZE / 2 + radius * math.cos(2 * math.pi * i / n - math.pi / 2),
            _SIZE / 2 + 20 + radius * math.sin(2 * math.pi * i / n - math.pi / 2),
        )
        for i, node in enumerate(ids)
    }
    counts = link_messages(net)
    busiest = max((sum(c.values()) for c in counts.values()), default=0) or 1
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_SIZE}" height="{_SIZE + 40}" '
        f'viewBox="0 0 {_SIZE} {_SIZE + 40}" font-family="sans-serif" font-size="11">',
        '<rect width="100%" height="100%" fill="#fafafa"/>',
        f'<text x="10" y="18" font-size="13">{escape(_title(net, report))}</text>',
    ]
    small = len(ids) <= 40  # labels on every link and node only while they stay legible
    for name, link in sorted(net.links.items()):
        (x1, y1), (x2, y2) = pos[link.dialer], pos[link.acceptor]
        c = counts[name]
        total = sum(c.values())
        width = 1 + 7 * total / busiest
        colour = "#2a2" if link.up else "#c22"
        parts.append(
            f"<g data-link={quoteattr(name)} data-from={quoteattr(link.dialer)} "
            f'data-to={quoteattr(link.acceptor)} data-messages="{total}">'
            f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{colour}" stroke-width="{width:.1f}" stroke-opacity="0.7"/>'
        )
        if small:
            ab = c[f"{link.dialer}>{link.acceptor}"]
            ba = c[f"{link.acceptor}>{link.dialer}"]
            label = f"{name}: {ab}\u2192 {ba}\u2190"
            parts.append(
                f'<text x="{(x1 + x2) / 2 + 4:.1f}" y="{(y1 + y2) / 2 - 4:.1f}" '
                f'fill="#555">{escape(label)}</text>'
            )
        parts.append("</g>")
    for node in ids:
        x, y = pos[node]
        subs = len(net.nodes[node].subs)
        fill = "#357" if subs else "#fff"
        parts.append(
            f'<g data-node={quoteattr(node)} data-subscriptions="{subs}">'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{_R_NODE}" fill="{fill}" stroke="#357" '
            f'stroke-width="2"/>'
        )
        if small:
            parts.append(f'<text x="{x + _R_NODE + 3:.1f}" y="{y + 4:.1f}">{escape(node)}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _title(net: Network, report: dict[str, Any] | None) -> str:
    text = f"{len(net.nodes)} nodes, {len(net.links)} links"
    if report:
        text += (
            f", {report['publishes']} publishes, {report['message_frames']} message frames, "
            f"{report['deliveries']} deliveries, {report['lost']} lost, "
            f"{report['duplicates']} duplicates"
        )
    return text
