"""Fan-out replication: replicas of a primary's stateful topics, kept per link.

A link with ``replicate = [branch, ...]`` (on the secondary, which dials the primary)
makes this node keep a replica of every stateful topic in those branches that the primary
sees (its own, its replicas, and what it reaches behind it):

* interest in each branch (source ``replica``) brings every update here; an update that
  came over the primary's link (the previous hop on its path is the primary) is applied
  to the replica (created, updated by version, or removed), and reaches this node's
  subscribers by the ordinary path;
* when the link comes up, a snapshot query for each branch goes over that link only; each
  value and removal of its answer is compared with this node's row of that topic, whatever
  its kind (a replica, a tombstone, a value set here): what is newer is stored and
  published to this node's subscribers (and only to them), the rest is left alone (the
  larger ``(version, owner)`` wins, as everywhere). A replica the answer lacks is removed
  (subscribers told), unless it arrived live after the primary read its part. An answer
  cut at a deadline (a node did not answer in time) is applied by version as well, but
  removes nothing and is asked again. Until every branch's complete answer is in, the
  link is ``syncing``; then ``in sync``;
* a short cut (the same primary process, back within :data:`RESUME_WINDOW`) resumes that
  way: the updates missed are caught up from the answer, exactly, by version. A session
  that cannot resume (the primary restarted, or the link stayed down longer) removes
  every replica taken from that primary (subscribers told: ``zb.removed`` =
  ``SESSION_LOST``); they are recreated, and published again, when the primary returns;
* while a link is in sync, a fetch or snapshot started here whose pattern lies inside
  one of its branches is answered from the replicas (the query does not go to the
  primary): clients spread over secondaries load the primary only with updates.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ...config import LinkConfig
from ...links.state import Link
from ...routing.filters import pattern_covers
from ...stateful import OWNER, REMOVED, SESSION_LOST, VERSION, newer
from ...store.state import StateRow
from ...topics import match
from .queries import Query
from .topics import Publish, StateTopics, update_headers

__all__ = ["RESUME_WINDOW", "Replicas"]

#: how long a cut may last and still resume (the primary's same process)
RESUME_WINDOW = 30.0


class Replica:
    """The replication of one link."""

    def __init__(self, cfg: LinkConfig) -> None:
        self.name = cfg.name
        self.branches = cfg.replicate
        self.peer: str | None = None  # the primary's broker ID, once its link was up
        self.incarnation: int | None = None  # of the primary's session we replicate
        self.link: Link | None = None
        self.state = "down"
        self.down_since: float | None = None
        self.pending = 0  # branches whose sync answer has not come
        #: replicas applied live while syncing (after the primary read them, or not at
        #: all: an answer that lacks them does not remove them)
        self.fresh: set[str] = set()
        self.lag: float | None = None  # seconds from the primary's receipt to applied
        self.applied = self.syncs = self.sessions_lost = self.retries = 0

    def holds(self, topic: str) -> bool:
        return any(match(b, topic) for b in self.branches)

    def status(self, topics: int) -> dict[str, Any]:
        return {
            "primary": self.peer,
            "branches": list(self.branches),
            "state": self.state,
            "topics": topics,
            "lag": self.lag,
            "applied": self.applied,
            "syncs": self.syncs,
            "retries": self.retries,
            "sessions_lost": self.sessions_lost,
        }


class Replicas:
    def __init__(
        self,
        links: tuple[LinkConfig, ...],
        topics: StateTopics,
        sync: Callable[[Link, str, Callable[[Query], None]], None],
        publish_here: Callable[[list[Publish]], None],
    ) -> None:
        self.by_name = {c.name: Replica(c) for c in links if c.replicate}
        self._topics = topics
        self._sync = sync  # a snapshot query over one link, its answer to a callback
        self._publish_here = publish_here  # to this node's subscribers only

    def branches(self) -> list[str]:
        return [b for r in self.by_name.values() for b in r.branches]

    def served_here(self, pattern: str) -> set[str]:
        """Engine IDs of links a fetch of ``pattern`` need not ask (replicas in sync)."""
        return {
            r.link.engine_id
            for r in self.by_name.values()
            if r.link is not None
            and r.state == "in sync"
            and any(pattern_covers(b, pattern) for b in r.branches)
        }

    def _rows(self, r: Replica) -> dict[str, StateRow]:
        return {
            t: row
            for t, row in self._topics.table.rows.items()
            if row.replica_of is not None and row.replica_of == r.peer and not row.removed
        }

    # -- the link --------------------------------------------------------------------------------

    def link_up(self, link: Link, now: float) -> None:
        r = self.by_name.get(link.name)
        if r is None or not link.dialer:
            return
        resumes = (
            r.peer == link.peer
            and r.incarnation == link.peer_incarnation
            and r.down_since is not None
            and now - r.down_since <= RESUME_WINDOW
        )
        if r.incarnation is not None and not resumes:
            self.lose(r)  # (a no-op if the window's end removed them already)
        r.peer, r.incarnation, r.link = link.peer, link.peer_incarnation, link
        r.state, r.down_since, r.pending = "syncing", None, len(r.branches)
        r.fresh.clear()
        for branch in r.branches:
            self._sync(link, branch, functools.partial(self._synced, r, branch))

    def link_down(self, link: Link, now: float) -> None:
        r = self.by_name.get(link.name)
        if r is not None and r.link is link:
            r.link, r.state, r.down_since = None, "down", now

    def tick(self, now: float) -> None:
        for r in self.by_name.values():
            if r.down_since is not None and now - r.down_since > RESUME_WINDOW:
                r.down_since = None
                self.lose(r)

    def lose(self, r: Replica) -> None:
        """The session cannot resume: remove every replica taken from ``r``'s primary."""
        rows = self._rows(r)
        if not rows:
            return
        r.sessions_lost += 1
        out: list[Publish] = []
        for topic, row in sorted(rows.items()):
            self._topics.table.delete(topic)
            self._topics.trie.discard(topic)
            headers = update_headers(row.headers, row.version, row.owner)
            headers[REMOVED] = SESSION_LOST
            out.append((topic, b"", 0, headers))
        self._publish_here(out)

    def _synced(self, r: Replica, branch: str, q: Query) -> None:
        """A branch's answer: catch this node up with it, exactly, by version."""
        if r.link is None:
            return  # (the link went down meanwhile: its next session syncs again)
        values, gone = q.result()
        out = self._catch_up(r, values, gone)
        if not q.cut:
            out += self._drop_missing(r, branch, values, gone)
        self._publish_here(out)
        if q.cut:
            # a part is missing (a node did not answer in time): what it lacks may well
            # exist, so nothing was removed, and the link is not in sync yet: ask again
            r.retries += 1
            self._sync(r.link, branch, functools.partial(self._synced, r, branch))
            return
        r.syncs += 1
        r.pending -= 1
        if r.pending <= 0:
            r.state = "in sync"
            r.fresh.clear()

    def _catch_up(self, r: Replica, values: list[Any], gone: list[list[Any]]) -> list[Publish]:
        """Store what the answer has newer than this node's row of its topic, whatever its
        kind: a tombstone (a removal that came live while the answer was on its way) or a
        value this node owns keeps its place if its ``(version, owner)`` is larger."""
        rows = self._topics.table.rows
        out: list[Publish] = []
        now = time.time()
        for v in values:
            cur = rows.get(v[0])
            if cur is None or newer(v[4], v[5], (cur.version, cur.owner)):
                self._put(r, StateRow(v[0], v[1], v[2], v[3], v[4], v[5], now, False, r.peer))
                out.append((v[0], v[1], v[2], update_headers(v[3], v[4], v[5])))
        for topic, version, owner in gone:
            cur = rows.get(topic)
            if cur is None or not newer(version, owner, (cur.version, cur.owner)):
                continue  # (nothing here to remove, or it is newer than the removal)
            self._put(r, StateRow(topic, b"", 0, None, version, owner, now, True, r.peer))
            if not cur.removed:
                out.append((topic, b"", 0, update_headers(cur.headers, version, owner, True)))
        return out

    def _drop_missing(
        self, r: Replica, branch: str, values: list[Any], gone: list[list[Any]]
    ) -> list[Publish]:
        """Remove the replicas a complete answer lacks (the primary has them no more),
        except those that came live after the primary read its part."""
        told = {v[0] for v in values} | {g[0] for g in gone}
        out: list[Publish] = []
        now = time.time()
        for topic, row in sorted(self._rows(r).items()):
            if topic in told or topic in r.fresh or not match(branch, topic):
                continue
            version, owner = row.version + 1, row.owner
            self._put(r, StateRow(topic, b"", 0, None, version, owner, now, True, r.peer))
            out.append((topic, b"", 0, update_headers(row.headers, version, owner, True)))
        return out

    def _put(self, r: Replica, row: StateRow) -> None:
        self._topics.table.put(row)
        self._topics.trie.add(row.topic)

    # -- updates -----------------------------------------------------------------------------

    def sink(self, batch: list[list[Any]]) -> None:
        """Updates that reached the replica interest: those from a primary applied."""
        rows = self._topics.table.rows
        for m in batch:
            headers = m[3]
            if not headers or type(headers.get(VERSION)) is not int:
                continue
            path = m[8]
            prev = path[-1] if path else None
            topic = m[0]
            for r in self.by_name.values():
                if r.peer != prev or r.link is None or not r.holds(topic):
                    continue
                version, owner = headers[VERSION], str(headers.get(OWNER, ""))
                cur = rows.get(topic)
                if cur is not None and not newer(version, owner, (cur.version, cur.owner)):
                    break
                removed = bool(headers.get(REMOVED))
                plain = {k: v for k, v in headers.items() if not k.startswith("zb.")}
                row = StateRow(
                    topic,
                    b"" if removed else m[1],
                    0 if removed else m[2],
                    plain or None,
                    version,
                    owner,
                    time.time(),
                    removed,
                    r.peer,
                )
                self._put(r, row)
                if r.state == "syncing":
                    r.fresh.add(topic)
                r.applied += 1
                r.lag = max(0.0, time.time() - m[7])
                break

    def status(self) -> dict[str, Any]:
        return {name: r.status(len(self._rows(r))) for name, r in self.by_name.items()}
