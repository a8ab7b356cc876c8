"""Fan-out replication: replicas of a primary's stateful topics, kept per link.

A link with ``replicate = [branch, ...]`` (on the secondary, which dials the primary)
makes this node keep a replica of every stateful topic in those branches that the primary
sees (its own, its replicas, and what it reaches behind it):

* interest in each branch (source ``replica``) brings every update here; an update from
  another node (over the primary's link, or round it in a mesh) is applied to the
  replica (created, updated by version, or removed), and reaches this node's
  subscribers by the ordinary path;
* when the link comes up, a snapshot query for each branch goes over that link only; each
  value and removal of its answer is compared with this node's row of that topic, whatever
  its kind (a replica, a tombstone, a value set here): what is newer is stored and
  published to this node's subscribers (and only to them), the rest is left alone (the
  larger ``(version, owner)`` wins, as everywhere). A replica the answer lacks is
  forgotten, unless it arrived live after the primary read its part: deleted with no
  tombstone (its owner may only be out of reach, and must not come back outranked by a
  version made up here), subscribers told as for a lost session. Until every
  branch has an answer, the link is ``syncing``; once every branch's answer was complete,
  ``in sync`` (exact: what the primary and every node behind it held);
* an answer ``cut`` (a node behind the primary did not answer in time, or its link went
  down) is applied by version as well, and removes only replicas of topics the primary
  owns (its own part is always whole in its answer; what the silent node holds is not the
  primary's to vouch for: it stays until a complete answer or the session's loss). The
  link is then ``partial`` and the branch is asked again after a backoff (from
  :data:`RETRY_FIRST`, doubling up to :data:`RETRY_MAX`), so a branch that never answers
  does not query the network every few seconds. An answer that never came from the
  primary itself (this node's own deadline) removes nothing, and the link stays
  ``syncing`` (asked again the same way);
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

__all__ = ["RESUME_WINDOW", "RETRY_FIRST", "RETRY_MAX", "Replicas"]

#: how long a cut may last and still resume (the primary's same process)
RESUME_WINDOW = 30.0
#: the wait before a cut sync answer's branch is asked again, doubled at each cut answer
#: up to RETRY_MAX (a branch of the network that cannot answer is not asked every 3 s)
RETRY_FIRST = 2.0
RETRY_MAX = 60.0


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
        self.unsynced: set[str] = set()  # branches no sync answer was applied to yet
        self.partial: set[str] = set()  # ... whose last answer was cut (the primary's part whole)
        self.backoff: dict[str, float] = {}  # branch: the wait after its next cut answer
        self.due: dict[str, float] = {}  # branch: when it is asked again (monotonic)
        self.retry_delay: float | None = None  # the last wait a cut answer scheduled
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
            "retry_delay": self.retry_delay,
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
        r.state, r.down_since = "syncing", None
        r.unsynced, r.partial = set(r.branches), set()
        r.backoff.clear()
        r.due.clear()
        r.retry_delay = None
        r.fresh.clear()
        for branch in r.branches:
            self._sync(link, branch, functools.partial(self._synced, r, branch))

    def link_down(self, link: Link, now: float) -> None:
        r = self.by_name.get(link.name)
        if r is not None and r.link is link:
            r.link, r.state, r.down_since = None, "down", now
            r.due.clear()

    def tick(self, now: float) -> None:
        for r in self.by_name.values():
            if r.down_since is not None and now - r.down_since > RESUME_WINDOW:
                r.down_since = None
                self.lose(r)
            for branch, at in list(r.due.items()):
                if r.link is not None and now >= at:
                    del r.due[branch]
                    self._sync(r.link, branch, functools.partial(self._synced, r, branch))

    def lose(self, r: Replica) -> None:
        """The session cannot resume: remove every replica taken from ``r``'s primary."""
        rows = self._rows(r)
        if not rows:
            return
        r.sessions_lost += 1
        self._publish_here([self._forget(topic, row) for topic, row in sorted(rows.items())])

    def _forget(self, topic: str, row: StateRow) -> Publish:
        """Delete a replica that can no longer be vouched for, leaving no tombstone (its
        owner never removed it: a version made up here would outrank the owner's real value
        everywhere once it is reachable again); its removal to publish here, marked
        ``SESSION_LOST``, so subscribers take its value again when it comes back, whatever
        its version."""
        self._topics.table.delete(topic)
        self._topics.trie.discard(topic)
        headers = update_headers(row.headers, row.version, row.owner)
        headers[REMOVED] = SESSION_LOST
        return (topic, b"", 0, headers)

    def _synced(self, r: Replica, branch: str, q: Query) -> None:
        """A branch's answer: catch this node up with it, exactly, by version."""
        if r.link is None:
            return  # (the link went down meanwhile: its next session syncs again)
        values, gone = q.result()
        # (the primary's own part is whole in any answer it sent, cut or not)
        primary_answered = r.link.engine_id not in q.missed
        out = self._catch_up(r, values, gone)
        if not q.cut:
            out += self._drop_missing(r, branch, values, gone)
        elif primary_answered:
            out += self._drop_missing(r, branch, values, gone, owner=r.peer)
        self._publish_here(out)
        if q.cut:
            self._retry_later(r, branch, primary_answered)
        else:
            r.syncs += 1
            r.unsynced.discard(branch)
            r.partial.discard(branch)
            r.backoff.pop(branch, None)
        r.state = "syncing" if r.unsynced else "partial" if r.partial else "in sync"
        if r.state == "in sync":
            r.fresh.clear()
            r.retry_delay = None

    def _retry_later(self, r: Replica, branch: str, primary_answered: bool) -> None:
        """A cut answer: what it lacks may well exist, so the branch is asked again, after
        a wait that doubles with each cut answer (a part that never answers costs the
        network one query per :data:`RETRY_MAX`, not one every few seconds)."""
        r.retries += 1
        if primary_answered:
            r.unsynced.discard(branch)
            r.partial.add(branch)
        delay = r.backoff.get(branch, RETRY_FIRST)
        r.backoff[branch] = min(delay * 2, RETRY_MAX)
        r.due[branch] = time.monotonic() + delay
        r.retry_delay = delay

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
        self,
        r: Replica,
        branch: str,
        values: list[Any],
        gone: list[list[Any]],
        owner: str | None = None,
    ) -> list[Publish]:
        """Forget the replicas an answer lacks, of topics ``owner`` owns if given (a cut
        answer vouches for the primary's own only), except those that came live after the
        primary read its part. The answer lacks a topic whose owner is out of the
        primary's reach as well as one whose removal it no longer remembers: neither is a
        removal with a version, so none is written (:meth:`_forget`)."""
        told = {v[0] for v in values} | {g[0] for g in gone}
        return [
            self._forget(topic, row)
            for topic, row in sorted(self._rows(r).items())
            if topic not in told
            and topic not in r.fresh
            and match(branch, topic)
            and (owner is None or row.owner == owner)
        ]

    def _put(self, r: Replica, row: StateRow) -> None:
        self._topics.table.put(row)
        self._topics.trie.add(row.topic)

    # -- updates -----------------------------------------------------------------------------

    def sink(self, batch: list[list[Any]]) -> None:
        """Updates that reached the replica interest from another node: applied to the
        replica of the link whose branch holds their topic, by version. One that came
        over the primary's link, always; one that came round it (in a mesh the shortest
        way from a topic's owner to this node need not pass the primary), only to a
        replica the primary vouched for: a topic the primary does not see (its owner
        reaches this node only by another way) is no replica of it, and its next sync
        would forget it and tell subscribers it was lost."""
        rows = self._topics.table.rows
        for m in batch:
            headers = m[3]
            if not headers or type(headers.get(VERSION)) is not int or not m[8]:
                continue
            # (this node's own word to its subscribers, a replica caught up or forgotten,
            # comes with a path of this node alone: no row of it is newer, or none is left)
            topic, prev = m[0], m[8][-1]
            for r in self.by_name.values():
                if r.link is None or not r.holds(topic):
                    continue
                version, owner = headers[VERSION], str(headers.get(OWNER, ""))
                cur = rows.get(topic)
                if prev != r.peer and (cur is None or cur.replica_of != r.peer):
                    break
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
                if r.state != "in sync":
                    r.fresh.add(topic)
                r.applied += 1
                r.lag = max(0.0, time.time() - m[7])
                break

    def status(self) -> dict[str, Any]:
        return {name: r.status(len(self._rows(r))) for name, r in self.by_name.items()}
