"""The staged-writes feature: STAGE, STAGE_COMMIT and STAGE_ABORT, and publishing what
was committed.

A commit is checked whole before a row goes out (every token complete, every feature able
to take the rows: admission), then stored whole with its ``(writer, batch)`` record in one
transaction (:mod:`zbroker.store.staged`); only after that commit are its rows published
as persistent messages that start here, :data:`APPLY_SLICE` per pass so heartbeats, links
and other clients are served in between, each slice's stored row removed in the
transaction of what it produced. A node killed meanwhile publishes, once restarted, the
slices it had not (none twice, none lost). The reply goes after the commit that holds the
last slice. A commit seen before (by its ``(writer, batch)``, or by its tokens) publishes
nothing and answers ``duplicate``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ... import wire
from ...node import Feature, Op, Refusal, Request
from ...node.context import Context
from .rows import Staging, StagingError

__all__ = ["APPLY_SLICE", "StagedWrites"]

log = logging.getLogger("zbroker.node")

#: committed staged rows published per poll pass
APPLY_SLICE = 2000
_I64 = 1 << 63


@dataclass(slots=True)
class _Applying:
    """A staged commit being published, slice by slice (``req`` None: resumed after a
    restart, nobody waits for its reply)."""

    req: Request | None
    cid: int  # its id in the store
    rows: int  # all its rows (the reply's ``applied``)
    slices: collections.deque[tuple[int, list[Any]]]  # (part, rows) not yet published
    key: tuple[str, int] | None
    stored: bool = False  # its store commit is done: its slices may go out
    #: topic -> [rows, bytes] not yet published: the room admission holds for them
    topics: dict[str, list[int]] = field(default_factory=dict)


class StagedWrites(Feature):
    name = "staging"

    def __init__(self) -> None:
        self.staging = Staging()  # rows of write tasks waiting for their commit
        self._applying: collections.deque[_Applying] = collections.deque()
        self._admitting = False  # (admit asks every feature again: not itself)

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx
        assert ctx.store is not None
        # commits applied before a restart: the same commit sent again is recognised
        self.staging.remember(ctx.store.staged.applied_tokens())
        for c in ctx.store.staged.load():
            # a commit this node stored and was killed while publishing: the rest goes out
            # first, and a commit re-sent meanwhile is recognized (key, tokens)
            self.staging.remember(c.tokens)
            slices = collections.deque(c.slices)
            job = _Applying(None, c.id, c.rows, slices, c.key, stored=True)
            for _, rows in c.slices:
                _count(job.topics, rows, 1)
            self._applying.append(job)
            log.warning(
                "resuming staged commit %d: %d of its %d rows were not published yet",
                c.id,
                sum(len(r) for _, r in c.slices),
                c.rows,
            )

    def ops(self) -> Sequence[Op]:
        return (
            Op(wire.STAGE, self._guard(self._stage), _stage_subjects),
            Op(wire.STAGE_COMMIT, self._guard(self._commit)),
            Op(wire.STAGE_ABORT, self._guard(self._abort)),
        )

    def _guard(self, handler: Any) -> Any:
        def op(req: Request) -> None:
            try:
                handler(req)
            except StagingError as exc:
                self._ctx.bad(self._ctx.source(req.ident), "bad_staging", str(exc))
                self._ctx.error(req, str(exc))

        return op

    def _stage(self, req: Request) -> None:
        body = req.body
        held = self.staging.stage(
            body.get("token"), body.get("part"), body.get("rows"), group=body.get("group")
        )
        self._ctx.reply(req, wire.STAGE, {"token": body["token"], "rows": held})

    def _abort(self, req: Request) -> None:
        staging = self.staging
        group = staging.check_group(req.body.get("group"))  # (bad: nothing discarded)
        dropped = staging.discard(req.body.get("tokens", []))
        if group is not None:
            dropped += staging.discard_group(group)
        self._ctx.reply(req, wire.STAGE_ABORT, {"discarded": dropped})

    def _commit(self, req: Request) -> None:
        # a malformed group refuses the whole commit before a row is applied
        group = self.staging.check_group(req.body.get("group"))
        self._start_commit(req)
        if group is not None:
            # attempts of this job that no commit names (failed, retried): gone now
            self.staging.discard_group(group)

    def _start_commit(self, req: Request) -> None:
        """Publish the rows of committed tokens, all or none, once per (writer, batch)."""
        staging, store = self.staging, self._ctx.store
        assert store is not None
        tokens = req.body.get("tokens")
        key = _batch_key(req.body)
        if key is None and staging.was_applied(tokens):
            # the same commit sent again (its reply was lost): it is out already
            staging.duplicate_commits += 1
            self._ctx.reply(req, wire.STAGE_COMMIT, {"applied": 0, "duplicate": True})
            return
        names = staging.commit_names(tokens)
        if key is not None and (
            store.batch_applied(*key) or any(a.key == key for a in self._applying)
        ):
            # a batch replayed (after a restart, with its rows staged anew or the same
            # commit sent again): its rows are out already
            staging.discard(names)
            staging.duplicate_commits += 1
            self._ctx.confirm(req, wire.STAGE_COMMIT, {"applied": 0, "duplicate": True})
            return
        staging.check_commit(tokens)
        if not names and key is None:
            self._ctx.reply(req, wire.STAGE_COMMIT, {"applied": 0, "duplicate": False})
            return
        # rows that some feature cannot take refuse the commit before anything is sent
        topics: dict[str, list[int]] = {}
        for t in names:
            _count(topics, staging.peek(t), 1)
        refusal = self._ctx.admit(topics, batch=True)
        if refusal is not None:
            self._ctx.drop("rejected_persistent", refusal.count)
            raise StagingError(refusal.message)
        names, rows = staging.take(tokens)
        if not rows:  # only empty tokens: nothing to publish, the batch is applied
            store.staged.applied(names)
            if key is not None:
                store.record_batch(*key, 0)
            self._ctx.confirm(req, wire.STAGE_COMMIT, {"applied": 0, "duplicate": False})
            return
        # stored whole, with its batch record, in this pass's transaction: nothing of it
        # goes out before that commit (after_commit), so a node killed at any point has
        # published either none of it or what the store says, and resumes the rest
        slices = [rows[i : i + APPLY_SLICE] for i in range(0, len(rows), APPLY_SLICE)]
        cid = store.staged.store(key, names, slices)
        if key is not None:
            store.record_batch(*key, len(rows))
        parts = collections.deque(enumerate(slices))
        self._applying.append(_Applying(req, cid, len(rows), parts, key, topics=topics))

    def admit(self, topics: dict[str, list[int]], *, batch: bool) -> Refusal | None:
        """While commits are being published slice by slice, what they have not yet
        published was admitted and holds its room: a persistent publish (or another
        commit) is admitted only if it fits together with them, so that it cannot take
        the room of a commit's later slices (they would be refused by a full
        ``reject-new`` bound, or push the oldest out of a full link queue)."""
        if self._admitting or not self._applying or not self._bounded():
            return None
        merged = {topic: list(v) for topic, v in topics.items()}
        for job in self._applying:
            for topic, (n, size) in job.topics.items():
                m = merged.setdefault(topic, [0, 0])
                m[0] += n
                m[1] += size
        self._admitting = True
        try:
            refusal = self._ctx.admit(merged, batch=batch)
        finally:
            self._admitting = False
        if refusal is None:
            return None
        return Refusal(
            f"{refusal.message} (counting the rows of staged commits this node is "
            "publishing, which hold that room)",
            sum(n for n, _ in topics.values()),
        )

    def _bounded(self) -> bool:
        """Can admission refuse anything here (some ``reject-new`` bound)?"""
        store = self._ctx.store
        return self._ctx.config.forward_overflow == "reject-new" or (
            store is not None and store.refuses_new()
        )

    def busy(self) -> bool:
        return bool(self._applying) and self._applying[0].stored

    def work(self) -> None:
        """Publish the next slice of the oldest commit; its stored row goes with it."""
        job = self._applying[0]
        store = self._ctx.store
        assert store is not None
        if job.slices:
            part, rows = job.slices.popleft()
            _count(job.topics, rows, -1)  # (the room it held is its own now)
            self._ctx.pipeline.originate([tuple(r) for r in rows], persistent=True)
            store.staged.published(job.cid, part, not job.slices)
        if job.slices:
            return
        self._applying.popleft()
        if job.req is not None:
            self._ctx.confirm(job.req, wire.STAGE_COMMIT, {"applied": job.rows, "duplicate": False})

    def after_commit(self) -> None:
        for job in self._applying:
            job.stored = True

    def tick(self, now: float) -> None:
        if self.staging.nbytes:
            expired = self.staging.expire(now)
            if expired:
                self._ctx.drop("staged_expired", expired)
                log.warning("discarded %d staged rows whose commit never came", expired)

    def status(self, out: dict[str, Any]) -> None:
        out["staging"] = {
            **self.staging.stats(),
            "applying_rows": sum(len(r) for a in self._applying for _, r in a.slices),
        }


def _count(topics: dict[str, list[int]], rows: Iterable[Sequence[Any]], sign: int) -> None:
    """Add (``sign`` 1) or take away (-1) ``rows`` to ``topics``: topic -> [rows, bytes]."""
    for row in rows:
        topic = row[0]
        t = topics.get(topic)
        if t is None:
            t = topics[topic] = [0, 0]
        t[0] += sign
        t[1] += sign * (len(topic) + len(row[1]))
        if t[0] == 0:
            del topics[topic]


def _batch_key(body: dict[str, Any]) -> tuple[str, int] | None:
    writer, batch = body.get("writer"), body.get("batch")
    if writer is None:
        return None
    if (
        type(writer) is not str
        or not 0 < len(writer) <= 256
        or type(batch) is not int
        or not 0 <= batch < _I64
    ):
        raise StagingError("writer must be a string of 1..256 characters with an integer batch")
    return (writer, batch)


def _stage_subjects(body: dict[str, Any]) -> Iterable[tuple[str, str]]:
    """Staged rows are checked when staged: the commit publishes what passed here."""
    rows = body.get("rows")
    for row in rows if type(rows) is list else ():
        topic = row[0] if type(row) is list and row else None
        if isinstance(topic, str):
            yield ("publish", topic)
