"""The feature interface: how a capability plugs into the kernel.

A feature is an object with hooks the kernel calls at fixed points of a pass (see
:mod:`zbroker.node.kernel` for the phases and their order). Every hook has a default that
does nothing, and the kernel calls, per phase, only the features that override it, so a
hook costs nothing where unused. No hook is ever called per message: a feature that takes
messages (a *sink*) names the interest sources it owns (``sink_sources``) and receives,
once per pipeline batch, every message whose local interest includes one of them.

What a feature may use is its :class:`~zbroker.node.context.Context`, given to
``attach``; features never import each other (shared machinery has its own module).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..links.state import Link
    from .context import Context
    from .events import NodeEvent

__all__ = ["Feature", "Op", "Refusal", "Request", "monitored"]


@dataclass(slots=True)
class Request:
    """A control request from a client (or a peer's control connection)."""

    ident: bytes  # the sender's routing id on the node's ROUTER
    op: int
    req_id: int  # 0: the sender wants no reply
    body: dict[str, Any]


#: what a request asks permission for: ("publish", topic), ("subscribe", pattern) or
#: ("monitor", what)
Subject = tuple[str, str]


def monitored(what: str) -> Callable[[dict[str, Any]], Iterable[Subject]]:
    """``subjects`` of an op that shows the node's own view of the network (its status,
    routes, peers): with security on only a client with ``monitor = true`` may ask, since
    the answer names topics and nodes beyond any client's own permissions."""
    subject = (("monitor", what),)
    return lambda body: subject


@dataclass(frozen=True, slots=True)
class Op:
    """A control op a feature serves, and what it asks permission for (security on):
    ``subjects(body)`` lists what the sender's key must be allowed (``("publish", topic)``,
    ``("subscribe", pattern)``, or ``("monitor", what)``: the node's own view of the
    network, :func:`monitored`); None: nothing."""

    op: int
    handler: Callable[[Request], None]
    subjects: Callable[[dict[str, Any]], Iterable[Subject]] | None = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why persistent messages cannot be taken (a full store or queue, reject-new)."""

    message: str
    count: int  # how many of the messages asked about this refusal counts as rejected


class Feature:
    """Base class of every feature; each hook's docstring says when the kernel calls it."""

    #: the feature's name (status, logs)
    name = "feature"
    #: interest sources (``LocalInterest``) whose messages this feature's sink takes:
    #: a source is ``NAME`` or ``NAME:detail``; listed here by ``NAME``
    sink_sources: tuple[str, ...] = ()

    def attach(self, ctx: Context) -> None:
        """Bind time, after the store opened: restore state, add interest."""

    def ops(self) -> Sequence[Op]:
        """The control ops this feature serves."""
        return ()

    def link_frames(self) -> Mapping[int, Callable[[Link, list[Any]], int]]:
        """Link frame types this feature handles: handler(link, frame) -> messages held."""
        return {}

    def start(self, now: float) -> None:
        """The loop starts."""

    def sink(self, batch: list[list[Any]]) -> None:
        """Messages (``[topic, payload, fmt, headers, origin, inc, seq, ts, ...]``, in
        pipeline order) whose local interest includes this feature's sources."""

    def admit(self, topics: dict[str, list[int]], *, batch: bool) -> Refusal | None:
        """Persistent messages on ``topics`` (topic -> [messages, bytes]) are about to be
        originated: a Refusal if this feature cannot take them (``batch``: a staged
        commit, else one publish)."""
        return None

    def busy(self) -> bool:
        """Work waits for the next pass: the loop polls without waiting."""
        return False

    def work(self) -> None:
        """Drain phase, after the sockets: one slice of the waiting work."""

    def link_up(self, link: Link, now: float) -> None:
        """A link came up (before any of its next frames is handled)."""

    def link_down(self, link: Link, now: float) -> None:
        """A link went down (before anything else is sent)."""

    def advert_in(self, link: Link) -> None:
        """An advertisement from ``link`` changed the routing table."""

    def on_events(self, events: list[NodeEvent]) -> None:
        """Events phase: the pass's node events, in order."""

    def before_commit(self) -> None:
        """Before the pass's store commit."""

    def after_commit(self) -> None:
        """After the pass's store commit (and the confirms it allows)."""

    def tick(self, now: float) -> None:
        """Every TICK_INTERVAL."""

    def status(self, out: dict[str, Any]) -> None:
        """Add this feature's figures to the node status ``out``."""

    def draining(self, now: float) -> bool:
        """The node was told to stop and serves on a moment, for clients to move away
        (the kernel's drain): tell whoever should know; True if someone was told (the
        kernel then waits for what they sent before they moved)."""
        return False

    def stop(self) -> None:
        """The loop is ending (the node still has its sockets)."""

    def close(self) -> None:
        """The node closes: release what ``attach`` opened."""


def overrides(feature: Feature, hook: str) -> bool:
    """Does ``feature`` implement ``hook`` (so the kernel must call it)?"""
    return getattr(type(feature), hook) is not getattr(Feature, hook)
