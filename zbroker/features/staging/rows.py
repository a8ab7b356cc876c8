"""Staged writes: rows a writer hands to a node now and the node publishes only on commit.

This is what makes the Spark connector's writes exactly-once (see ``docs/architecture.md``,
"Staged writes"). Spark runs a write task, possibly several times (task retries,
speculation, a batch replayed after a driver restart), and decides afterwards which
attempts count. So each task attempt stages its rows under a fresh **token**
(``STAGE``, in numbered chunks); the driver then either **commits** the tokens of the
attempts Spark kept (``STAGE_COMMIT``) — and only then does the node publish those rows —
or **aborts** them (``STAGE_ABORT``), and the rows vanish. Rows of attempts nobody commits
(a task that died) expire after ``ttl`` seconds, counted.

Tokens may carry a **group** (the Spark connector uses one per write job / query run): a
commit or abort naming the group also discards every other token of the group — the rows of
attempts that failed and were retried, which no commit will ever name — right away instead
of at the TTL.

A commit may name its ``(writer, batch)``; the node records it with the rows it retains, in
the same store transaction, and applies a second commit of the same pair as a no-op — a
batch Spark replays after a restart is published once. A commit is all-or-nothing: every
token must be complete (its row count given by the writer matches) or nothing is applied.

This module is sans-IO: :class:`Staging` holds the state and checks requests; the node
publishes the rows and sends replies.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidTopic
from ...store.staged import APPLIED_TOKENS_KEPT
from ...topics import validate_publish_topic

__all__ = [
    "DEFAULT_STAGE_MAX_BYTES",
    "DEFAULT_STAGE_TTL",
    "StagedRow",
    "Staging",
    "StagingError",
]

#: Bytes of rows (topic + payload) a node holds staged at most, over all tokens.
DEFAULT_STAGE_MAX_BYTES = 512 * 1024 * 1024
#: Seconds a token may wait for its commit before its rows are discarded (counted).
DEFAULT_STAGE_TTL = 600.0
#: Tokens applied (kept in the store too): a re-sent commit is answered "duplicate".
_APPLIED_TOKENS_KEPT = APPLIED_TOKENS_KEPT
_MAX_TOKEN_LEN = 128

StagedRow = tuple[str, bytes, int, "dict[str, Any] | None"]


class StagingError(Exception):
    """A staging request the node refuses; the message goes back to the writer."""


@dataclass(slots=True)
class _Token:
    created: float
    rows: list[StagedRow] = field(default_factory=list)
    parts: int = 0  # chunks received: the next one must be numbered ``parts``
    nbytes: int = 0
    group: str | None = None


def _check_token(token: Any) -> str:
    if type(token) is not str or not 0 < len(token) <= _MAX_TOKEN_LEN:
        raise StagingError(f"token must be a string of 1..{_MAX_TOKEN_LEN} characters")
    return token


def _check_row(row: Any) -> StagedRow:
    if type(row) is not list or len(row) != 4:
        raise StagingError("a staged row must be [topic, payload, fmt, headers]")
    topic, payload, fmt, headers = row
    if type(topic) is not str or type(payload) is not bytes:
        raise StagingError("a staged row needs a string topic and bytes payload")
    if type(fmt) is not int or fmt not in (0, 1):
        raise StagingError(f"unknown payload format {fmt!r}")
    if headers is not None and (
        type(headers) is not dict or not all(type(k) is str for k in headers)
    ):
        raise StagingError("headers must be a map with string keys")
    try:
        validate_publish_topic(topic)
    except InvalidTopic as exc:
        raise StagingError(str(exc)) from None
    return topic, payload, fmt, headers


class Staging:
    """Rows staged under tokens, until a commit takes them or an abort drops them."""

    def __init__(
        self, max_bytes: int = DEFAULT_STAGE_MAX_BYTES, ttl: float = DEFAULT_STAGE_TTL
    ) -> None:
        self.max_bytes = max_bytes
        self.ttl = ttl
        self._tokens: dict[str, _Token] = {}
        self.nbytes = 0
        # without a (writer, batch) a commit is recognized again by its tokens
        self._applied: OrderedDict[str, None] = OrderedDict()
        self.applied_rows = 0
        self.commits = 0
        self.duplicate_commits = 0
        self.aborted_rows = 0
        self.expired_rows = 0

    def stage(
        self, token: Any, part: Any, rows: Any, now: float | None = None, group: Any = None
    ) -> int:
        """Add chunk ``part`` (0, 1, 2, ...) of ``token``'s rows; returns the rows now held
        under the token. A chunk sent again (the writer retried) is not added twice."""
        token = _check_token(token)
        if group is not None:
            group = _check_token(group)
        if type(part) is not int or part < 0:
            raise StagingError("part must be a non-negative integer")
        if type(rows) is not list:
            raise StagingError("rows must be an array")
        if token in self._applied:
            raise StagingError(f"token {token!r} was committed already")
        held = self._tokens.get(token)
        if held is None and part != 0:
            raise StagingError(
                f"token {token!r} is unknown here (the node restarted, or it expired): "
                f"chunk {part} cannot be added; the task must be retried"
            )
        if held is not None:
            if part < held.parts:
                return len(held.rows)  # a repeat of a chunk we have
            if part > held.parts:
                raise StagingError(f"token {token!r}: chunk {part} arrived before {held.parts}")
        checked = [_check_row(r) for r in rows]
        size = sum(len(t) + len(p) for t, p, _, _ in checked)
        if self.nbytes + size > self.max_bytes:
            raise StagingError(
                f"staging is full ({self.nbytes} of {self.max_bytes} bytes held): commit or "
                "abort staged writes first"
            )
        if held is None:  # only an accepted chunk creates the token
            held = self._tokens[token] = _Token(
                now if now is not None else time.monotonic(), group=group
            )
        held.rows.extend(checked)
        held.parts += 1
        held.nbytes += size
        self.nbytes += size
        return len(held.rows)

    def token_state(self, token: str) -> tuple[int, int] | None:
        """(rows held, chunks received) of a staged token, None if it is not staged."""
        held = self._tokens.get(token)
        return None if held is None else (len(held.rows), held.parts)

    def peek(self, token: str) -> list[StagedRow]:
        """The rows held under a token checked by :meth:`check_commit` (not removed)."""
        return self._tokens[token].rows

    def was_applied(self, tokens: Any) -> bool:
        """Were all these tokens (names, or a commit's ``[[token, rows], ...]``) applied by
        an earlier commit (a commit sent again)?"""
        if type(tokens) is not list or not tokens:
            return False
        names = [t[0] if type(t) is list and t else t for t in tokens]
        return all(type(t) is str and t in self._applied for t in names)

    def take(self, tokens: Any) -> tuple[list[str], list[StagedRow]]:
        """Remove and return the rows of ``[[token, rows], ...]``, in the order given —
        all of them or none: a token that is unknown or holds another number of rows
        than its writer sent refuses the whole commit (and leaves everything staged)."""
        names = self.check_commit(tokens)
        out: list[StagedRow] = []
        for name in names:
            held = self._tokens.pop(name)
            self.nbytes -= held.nbytes
            out.extend(held.rows)
            self._remember(name)
        self.applied_rows += len(out)
        self.commits += 1
        return names, out

    @staticmethod
    def commit_names(tokens: Any) -> list[str]:
        """The token names of a well-formed commit's ``[[token, rows], ...]`` (staged here
        or not); raises StagingError for a malformed one."""
        if type(tokens) is not list:
            raise StagingError("tokens must be an array of [token, rows]")
        names: list[str] = []
        seen: set[str] = set()
        for entry in tokens:
            if type(entry) is not list or len(entry) != 2 or type(entry[1]) is not int:
                raise StagingError("tokens must be an array of [token, rows]")
            name = _check_token(entry[0])
            if name in seen:
                raise StagingError(f"token {name!r} appears twice in one commit")
            seen.add(name)
            names.append(name)
        return names

    def check_commit(self, tokens: Any) -> list[str]:
        """Validate a commit's ``[[token, rows], ...]`` without changing anything: well
        formed, every token staged here with the number of rows its writer sent."""
        names = self.commit_names(tokens)
        for name, entry in zip(names, tokens, strict=True):
            held = self._tokens.get(name)
            if held is None:
                raise StagingError(
                    f"token {name!r} is not staged here (the node restarted, it expired, "
                    "or it was aborted): nothing of this commit was applied"
                )
            if len(held.rows) != entry[1]:
                raise StagingError(
                    f"token {name!r} holds {len(held.rows)} rows, the writer sent {entry[1]}: "
                    "nothing of this commit was applied"
                )
        return names

    def discard(self, tokens: Any) -> int:
        """Drop the rows of these tokens (unknown ones are ignored); returns rows dropped."""
        if type(tokens) is not list:
            raise StagingError("tokens must be an array of token strings")
        dropped = 0
        for token in tokens:
            held = self._tokens.pop(_check_token(token), None)
            if held is not None:
                self.nbytes -= held.nbytes
                dropped += len(held.rows)
        self.aborted_rows += dropped
        return dropped

    @staticmethod
    def check_group(group: Any) -> str | None:
        """A request's ``group`` as :meth:`discard_group` takes it (None: no group); raises
        StagingError for a malformed one. A commit checks it before anything is applied."""
        return None if group is None else _check_token(group)

    def discard_group(self, group: Any) -> int:
        """Drop every token still staged in ``group``; returns rows dropped."""
        group = _check_token(group)
        return self.discard([t for t, held in self._tokens.items() if held.group == group])

    def expire(self, now: float) -> int:
        """Drop tokens older than ``ttl`` (their task died uncommitted); returns rows."""
        old = [t for t, held in self._tokens.items() if now - held.created > self.ttl]
        dropped = 0
        for token in old:
            held = self._tokens.pop(token)
            self.nbytes -= held.nbytes
            dropped += len(held.rows)
        self.expired_rows += dropped
        return dropped

    def remember(self, tokens: list[str]) -> None:
        """Tokens applied by a commit this node stored before it restarted: the commit
        sent again is recognized."""
        for token in tokens:
            self._remember(token)

    def _remember(self, token: str) -> None:
        self._applied[token] = None
        if len(self._applied) > _APPLIED_TOKENS_KEPT:
            self._applied.popitem(last=False)

    def stats(self) -> dict[str, int]:
        return {
            "tokens": len(self._tokens),
            "rows": sum(len(h.rows) for h in self._tokens.values()),
            "bytes": self.nbytes,
            "commits": self.commits,
            "duplicate_commits": self.duplicate_commits,
            "applied_rows": self.applied_rows,
            "aborted_rows": self.aborted_rows,
            "expired_rows": self.expired_rows,
        }
