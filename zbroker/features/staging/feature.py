"""The staged-writes feature: STAGE, STAGE_COMMIT and STAGE_ABORT, and publishing what
was committed.

A commit is checked whole before a row goes out (every token complete, every feature able
to take the rows: admission), then its rows are published as persistent messages that
start here, :data:`APPLY_SLICE` per pass so heartbeats, links and other clients are
served in between. The ``(writer, batch)`` record and the reply go with the last slice,
in the same store transaction as its retained rows. A commit seen before (by its
``(writer, batch)``, or by its tokens) publishes nothing and answers ``duplicate``.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ... import wire
from ...node import Feature, Op, Request
from ...node.context import Context
from .rows import Staging, StagingError

__all__ = ["APPLY_SLICE", "StagedWrites"]

log = logging.getLogger("zbroker.node")

#: committed staged rows published per poll pass
APPLY_SLICE = 2000
_I64 = 1 << 63


@dataclass(slots=True)
class _Applying:
    """A staged commit being published, slice by slice."""

    req: Request
    rows: list[Any]
    key: tuple[str, int] | None
    pos: int = 0


class StagedWrites(Feature):
    name = "staging"

    def __init__(self) -> None:
        self.staging = Staging()  # rows of write tasks waiting for their commit
        self._applying: collections.deque[_Applying] = collections.deque()

    def attach(self, ctx: Context) -> None:
        self._ctx = ctx

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
        names = staging.check_commit(tokens)
        if key is not None and (
            store.batch_applied(*key) or any(a.key == key for a in self._applying)
        ):
            # a batch replayed after a restart: its rows are out already
            staging.discard(names)
            staging.duplicate_commits += 1
            self._ctx.confirm(req, wire.STAGE_COMMIT, {"applied": 0, "duplicate": True})
            return
        if not names and key is None:
            self._ctx.reply(req, wire.STAGE_COMMIT, {"applied": 0, "duplicate": False})
            return
        # rows that some feature cannot take refuse the commit before anything is sent
        staged = [row for t in names for row in staging.peek(t)]
        topics: dict[str, list[int]] = {}
        for row in staged:
            t = topics.setdefault(row[0], [0, 0])
            t[0] += 1
            t[1] += len(row[0]) + len(row[1])
        refusal = self._ctx.admit(topics, batch=True)
        if refusal is not None:
            self._ctx.drop("rejected_persistent", refusal.count)
            raise StagingError(refusal.message)
        _, rows = staging.take(tokens)
        self._applying.append(_Applying(req, rows, key))

    def busy(self) -> bool:
        return bool(self._applying)

    def work(self) -> None:
        """Publish the next slice of the oldest commit."""
        job = self._applying[0]
        end = min(job.pos + APPLY_SLICE, len(job.rows))
        self._ctx.pipeline.originate([tuple(r) for r in job.rows[job.pos : end]], persistent=True)
        job.pos = end
        if end < len(job.rows):
            return
        self._applying.popleft()
        if job.key is not None and self._ctx.store is not None:
            self._ctx.store.record_batch(*job.key, len(job.rows))
        self._ctx.confirm(
            job.req, wire.STAGE_COMMIT, {"applied": len(job.rows), "duplicate": False}
        )

    def tick(self, now: float) -> None:
        if self.staging.nbytes:
            expired = self.staging.expire(now)
            if expired:
                self._ctx.drop("staged_expired", expired)
                log.warning("discarded %d staged rows whose commit never came", expired)

    def status(self, out: dict[str, Any]) -> None:
        out["staging"] = {
            **self.staging.stats(),
            "applying_rows": sum(len(a.rows) - a.pos for a in self._applying),
        }


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
