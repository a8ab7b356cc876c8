"""``/metrics``: the snapshot in Prometheus text format, through prometheus-client.

One custom collector reads the snapshot the scrape found (it never touches the node):
counters come from the node's lifetime counters and from the per-link totals that
outlive links (:class:`~.snapshot.LinkTotals`), so every ``zbroker_*_total`` only ever
increases while the node runs; gauges are what the node holds now. docs/metrics.md lists
every metric; keep it in step with this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .snapshot import Snapshot, link_key

__all__ = ["CONTENT_TYPE", "MetricsRenderer"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# node counter (status "counters" key) -> (metric, help)
_COUNTERS = {
    "received": (
        "zbroker_messages_received_total",
        "Messages originated here (client publishes, persistent, staged).",
    ),
    "forwarded": ("zbroker_messages_forwarded_total", "Message copies sent on links."),
    "delivered": ("zbroker_messages_delivered_total", "Messages delivered to local subscribers."),
    "unrouted": (
        "zbroker_messages_unrouted_total",
        "Client publishes no subscriber anywhere wanted (not a drop: nobody asked).",
    ),
    "duplicates": ("zbroker_messages_duplicate_total", "Relayed messages dropped as duplicates."),
    "bad_input": ("zbroker_bad_input_total", "Malformed frames or requests, counted and dropped."),
    "links_up": ("zbroker_link_ups_total", "Times a link came up."),
    "links_down": ("zbroker_link_downs_total", "Times a link that was up went down."),
    "durable_stored": ("zbroker_durable_stored_total", "Messages stored for durables."),
    "durable_delivered": ("zbroker_durable_delivered_total", "Durable messages delivered."),
}
# per-link totals (LINK_FIELDS order) -> (metric, help)
_LINK_COUNTERS = (
    ("zbroker_link_messages_received_total", "Messages received on a link."),
    ("zbroker_link_messages_sent_total", "Messages sent on a link."),
    ("zbroker_link_bytes_received_total", "Frame bytes received on a link."),
    ("zbroker_link_bytes_sent_total", "Frame bytes sent on a link."),
    ("zbroker_link_dropped_total", "Messages a link lost (down with a full outbox, too large)."),
)


class _SnapshotCollector(Collector):
    def __init__(self, current: Callable[[], Snapshot | None]) -> None:
        self._current = current

    def collect(self) -> Iterator[Metric]:
        snap = self._current()
        if snap is None:
            return
        status: dict[str, Any] = snap.doc("status")
        yield from _counters(status)
        yield from _forward(status)
        yield from _links(snap, status)
        yield from _gauges(snap, status)


def _counters(status: dict[str, Any]) -> Iterator[Metric]:
    c = status["counters"]
    for key, (name, doc) in _COUNTERS.items():
        if key in c:
            yield CounterMetricFamily(name, doc, value=c[key])
    dropped = CounterMetricFamily(
        "zbroker_messages_dropped_total", "Messages dropped, by reason.", labels=["reason"]
    )
    for reason, n in c.get("dropped", {}).items():
        dropped.add_metric([reason], n)
    yield dropped
    yield CounterMetricFamily(
        "zbroker_slow_subscriber_messages_total",
        "Messages subscribers reported lost to their full queues here (GAPS).",
        value=c.get("dropped", {}).get("slow_subscriber", 0),
    )
    hs = CounterMetricFamily(
        "zbroker_handshake_failures_total",
        "Link handshakes and connections refused, by reason.",
        labels=["reason"],
    )
    # every refusal counts in handshakes_refused; those for a duplicate ID also on their own
    duplicate = c.get("handshakes_refused_duplicate_id", 0)
    hs.add_metric(["duplicate_broker_id"], duplicate)
    hs.add_metric(["handshake"], max(0, c.get("handshakes_refused", 0) - duplicate))
    hs.add_metric(["auth"], c.get("auth_failures", 0))
    yield hs


# store-and-forward's node-level counters (status "forward" key) -> (metric, help); its
# per-queue drop counts are not here: they vanish with their queues
_FORWARD = {
    "queued": ("zbroker_forward_queued_total", "Persistent messages queued for links."),
    "duplicates": ("zbroker_forward_duplicates_total", "Link queue entries received twice."),
    "gaps": ("zbroker_forward_gaps_total", "Link queue entries out of order (sent again)."),
    "lost": (
        "zbroker_forward_lost_total",
        "Link queue entries the sender dropped (its bounds) before this node had them.",
    ),
}


def _forward(status: dict[str, Any]) -> Iterator[Metric]:
    forward = status.get("forward") or {}
    for key, (name, doc) in _FORWARD.items():
        if key in forward:
            yield CounterMetricFamily(name, doc, value=forward[key])


def _links(snap: Snapshot, status: dict[str, Any]) -> Iterator[Metric]:
    families = [
        CounterMetricFamily(name, doc, labels=["link", "peer", "kind"])
        for name, doc in _LINK_COUNTERS
    ]
    for key, totals in snap.link_totals.items():
        for family, value in zip(families, totals, strict=True):
            family.add_metric(list(key), value)
    yield from families
    up = GaugeMetricFamily(
        "zbroker_link_up",
        "1 while a link is up, else 0.",
        labels=["link", "peer", "kind", "state"],
    )
    for link in status.get("links", []):
        key = link_key(link["name"], link["peer"], link["kind"])
        up.add_metric([*key, link["state"]], 1 if link["state"] == "up" else 0)
    yield up


def _gauges(snap: Snapshot, status: dict[str, Any]) -> Iterator[Metric]:
    def gauge(name: str, doc: str, value: float) -> Metric:
        return GaugeMetricFamily(name, doc, value=value)

    info = GaugeMetricFamily(
        "zbroker_info", "The node's identity (value 1).", labels=["broker_id", "version"]
    )
    info.add_metric([status["broker_id"], str(status["version"])], 1)
    yield info
    yield gauge(
        "zbroker_incarnation",
        "This node's incarnation: larger on every start (seconds since 2024, or above the last).",
        status["incarnation"],
    )
    yield gauge("zbroker_uptime_seconds", "Seconds since the node started.", status["uptime"])
    links = status.get("links", [])
    yield gauge("zbroker_links", "Links known (any state).", len(links))
    yield gauge("zbroker_links_up", "Links up.", sum(1 for x in links if x["state"] == "up"))
    interest = status.get("interest", {})
    yield gauge("zbroker_interest_entries", "Interest table entries.", interest.get("entries", 0))
    yield gauge(
        "zbroker_interest_routes", "Best routes (pattern, origin).", interest.get("routes", 0)
    )
    yield gauge(
        "zbroker_subscriptions", "Local subscription patterns.", status["subscriptions"]["count"]
    )
    durables = status.get("durables", [])
    yield gauge("zbroker_durables", "Durable subscriptions.", len(durables))
    held = GaugeMetricFamily(
        "zbroker_durable_messages", "Messages a durable holds.", labels=["durable"]
    )
    for d in durables:
        held.add_metric([d["name"]], d["stored"])
    yield held
    yield gauge("zbroker_queues", "Queues.", len(status.get("queues", [])))
    store = status.get("store") or {}
    yield gauge(
        "zbroker_store_retained_messages",
        "Rows in the retention log.",
        store.get("retained_rows", 0),
    )
    yield gauge("zbroker_store_bytes", "Bytes of the store's files on disk.", snap.store_bytes)
    forward = status.get("forward") or {}
    yield gauge(
        "zbroker_forward_queued_messages",
        "Persistent messages waiting in link queues (store-and-forward).",
        forward.get("held", 0),
    )
    yield gauge(
        "zbroker_forward_queued_bytes", "Bytes of those messages.", forward.get("held_bytes", 0)
    )
    yield gauge(
        "zbroker_store_writable", "1 if the store can be written.", 0 if snap.store_error else 1
    )
    yield gauge(
        "zbroker_snapshot_timestamp_seconds", "When the snapshot served was taken.", snap.wall
    )


class MetricsRenderer:
    """Renders the current snapshot (one registry, one collector, for the server's life)."""

    def __init__(self, current: Callable[[], Snapshot | None]) -> None:
        self._registry = CollectorRegistry(auto_describe=False)
        self._registry.register(_SnapshotCollector(current))

    def render(self) -> bytes:
        return generate_latest(self._registry)
