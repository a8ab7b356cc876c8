"""Durable subscriptions with a selector: what the durable's interest says, which messages
its queue takes, and what a reopen may ask.

A durable's selector is part of what the durable *is*, like its pattern: it is stored with
it (``durables.selector``, canonical text), survives restarts, and decides what is stored —
the sink appends a matching message only if the selector accepts its headers. Its interest
source is ``durable:NAME select:CANONICAL`` (:func:`zbroker.routing.selection.selected_source`):
sticky like any durable's, and selected, so the network is told the selector and a relay
does not send what it rejects (routing rule 7).

A reopen must name the same selector (compared by canonical text; no selector is a
selector too): a durable opened with another one is refused with an error naming both.
JMS would instead delete the durable and make a new one when nobody is attached, losing
what it stored; here that takes an explicit :meth:`zbroker.Client.delete_durable`, as a
change of pattern does, so a mistyped selector cannot silently drop a stored backlog.
"""

from __future__ import annotations

import logging

from ...errors import SelectorError
from ...routing.selection import selected_source
from ...selectors import Selector, selector
from .state import Durable

__all__ = ["interest_source", "mismatch", "stored_selector"]

log = logging.getLogger("zbroker.node")


def interest_source(d: Durable) -> str:
    """The local interest source of durable ``d`` (its selector named, if it has one)."""
    return selected_source("durable:" + d.name, None if d.selector is None else d.selector.text)


def mismatch(d: Durable, wanted: str | None) -> str | None:
    """Why a DURABLE_OPEN asking for selector ``wanted`` (canonical) cannot open ``d``."""
    have = None if d.selector is None else d.selector.text
    if have == wanted:
        return None
    return (
        f"durable subscription {d.name!r} exists with "
        + (f"selector {have!r}" if have is not None else "no selector")
        + ", not "
        + (f"{wanted!r}" if wanted is not None else "without one")
        + ": delete it first (its stored messages go with it) to change the selector"
    )


def stored_selector(name: str, text: str | None) -> Selector | None:
    """The compiled selector stored with durable ``name``. One that no longer compiles (a
    store from another version) is logged, and the durable takes every message: more
    stored than asked for, never a message lost."""
    if text is None:
        return None
    try:
        return selector(text)
    except SelectorError as exc:
        log.error("durable %r: its stored selector does not compile, ignored: %s", name, exc)
        return None
