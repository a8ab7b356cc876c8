"""The monitor feature: publishes snapshots of the node from the loop and serves them
over HTTP from its own threads (metrics, health, JSON API, the network map).

The loop's side costs nothing per message: at each tick it notes that it is alive, and
builds a snapshot only every ``interval`` while somebody read one in the last
:data:`IDLE` seconds (or at once when a reader finds the last one stale). A reader never
waits on the loop for more than :data:`FRESH_WAIT`: it serves the newest snapshot there is.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

from ... import wire
from ...errors import AddressInUse
from ...node import Feature
from ...wire.codec import packb
from .snapshot import LinkTotals, Snapshot, probe_store, rates, store_bytes

if TYPE_CHECKING:
    from ...config import MonitorConfig
    from ...links.state import Link
    from ...node.context import Context
    from .server import MonitorServer

__all__ = ["Monitor", "MonitorHub"]

#: seconds after the last read during which the loop keeps publishing snapshots
IDLE = 120.0
#: seconds a reader waits for a fresh snapshot when the newest is stale
FRESH_WAIT = 2.0
#: seconds past the interval after which a reader asks for a fresh snapshot and waits
STALE_SLACK = 1.5
#: seconds without a tick after which /healthz calls the loop stalled
LOOP_STALL = 5.0


class MonitorHub:
    """What the loop and the HTTP threads share: the published snapshot (one reference,
    swapped whole), the loop's heartbeat, and the readers' demand. Plain attributes:
    each is written by one side and read by the other, one reference at a time."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.snapshot: Snapshot | None = None
        self.beat = 0.0  # monotonic time of the loop's last tick (0: none yet, or stopped)
        self.stopped = False  # the loop has finished
        self.read_at = -IDLE  # monotonic time of the last read
        self.want = False  # a reader found the snapshot stale
        self._cond = threading.Condition()
        self.loop_stall = LOOP_STALL
        self.idle = IDLE
        self.published = 0  # snapshots built (a nobody-reads node builds none after IDLE)

    # -- the loop's side ------------------------------------------------------------------

    def due(self, now: float) -> bool:
        snap = self.snapshot
        if self.want or snap is None:
            return True
        return now - snap.taken >= self.interval and now - self.read_at < self.idle

    def publish(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.want = False
        self.published += 1
        with self._cond:
            self._cond.notify_all()

    # -- the readers' side ----------------------------------------------------------------

    def current(self) -> Snapshot | None:
        """The newest snapshot; a fresh one first when the loop has stopped refreshing
        (nobody read for a while), waiting at most FRESH_WAIT (a stalled loop still gets
        the last one served). While reads continue the loop refreshes every interval, at
        its next tick: up to a second later on a node without links (its poll waits up
        to a second then), hence the slack."""
        now = self.read_at = time.monotonic()
        snap = self.snapshot
        if snap is None or now - snap.taken > self.interval + STALE_SLACK:
            self.want = True
            with self._cond:
                self._cond.wait_for(lambda: self.snapshot is not snap, FRESH_WAIT)
            snap = self.snapshot
        return snap

    def health(self) -> tuple[bool, str]:
        """(healthy, why): the loop ticked lately and the store can be written."""
        stalled = self._stalled()
        if stalled is None or self.starting:
            # a node just started has not ticked yet: its first tick publishes a snapshot
            # (current() asks for one), so wait for it rather than answer "not running"
            snap = self.current()
            # a loop that stalls while we wait for its snapshot is caught here
            stalled = self._stalled()
        if stalled is not None:
            return False, stalled
        if snap is None:
            return False, "the node has published no snapshot yet"
        if snap.store_error is not None:
            return False, snap.store_error
        return True, "ok"

    @property
    def starting(self) -> bool:
        """The node has not ticked yet and has not stopped."""
        return self.beat == 0.0 and not self.stopped

    def _stalled(self) -> str | None:
        if self.beat == 0.0:
            return "the node loop is not running"
        idle = time.monotonic() - self.beat
        if idle > self.loop_stall:
            return f"the node loop has not run for {idle:.1f} s"
        return None


class Monitor(Feature):
    """Serves the node's metrics, health, JSON API and map (``[monitor]``)."""

    name = "monitor"

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.hub = MonitorHub(config.interval)
        self._totals = LinkTotals()
        self._server: MonitorServer | None = None

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        from .server import MonitorServer  # prometheus-client: only a node that monitors

        host, port = self.config.address()
        # binds now: a taken port fails the node's start, saying which
        try:
            self._server = MonitorServer(host, port, self.hub)
        except OSError as exc:
            raise AddressInUse(
                f"monitor: cannot listen on {host}:{port}: {exc.strerror or exc}"
            ) from exc
        self._server.start()

    def link_down(self, link: Link, now: float) -> None:
        # an accepted or discovered link vanishes now (it has left the table already):
        # keep what it counted, and let it go (a node nobody reads builds no snapshot,
        # so waiting for one to forget it would hold every link that ever went)
        gone = all(other is not link for other in self._ctx.links.all())
        self._totals.fold(link, gone_at=now if gone else None)

    def tick(self, now: float) -> None:
        self.hub.beat = now
        if self.hub.due(now):
            self.hub.publish(self._snapshot(now))

    def _snapshot(self, now: float) -> Snapshot:
        ctx = self._ctx
        replies: dict[str, Any] = {
            "status": ctx.ask(wire.STATUS) or ctx.status(),
            "routes": (ctx.ask(wire.ROUTES) or {}).get("routes", []),
            "peers": (ctx.ask(wire.PEERS) or {}).get("peers", []),
        }
        totals = self._totals.update(ctx.links.all(), now)
        return Snapshot(
            taken=now,
            wall=time.time(),
            packed={name: packb(body) for name, body in replies.items()},
            link_totals=totals,
            link_rates=rates(self.hub.snapshot, totals, now),
            store_error=probe_store(ctx.data_dir),
            store_bytes=store_bytes(ctx.data_dir),
        )

    def status(self, out: dict[str, Any]) -> None:
        out["monitor"] = {"url": self._server.url if self._server else None}

    def stop(self) -> None:
        self.hub.beat = 0.0
        self.hub.stopped = True

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
