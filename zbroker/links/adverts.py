"""ADVERT frames coming in: decoded, their names checked, and handed to the routing
engine as one :class:`~zbroker.routing.AdvertIn` (what goes out is :mod:`.flush`'s)."""

from __future__ import annotations

from typing import Any

from .. import wire
from ..errors import ConfigError, InvalidTopic, ProtocolError
from ..names import validate_broker_id
from ..routing import AdvertIn, RoutingEngine
from ..topics import validate_pattern

__all__ = ["advert_in"]


def advert_in(engine: RoutingEngine, link_id: str, value: list[Any]) -> int:
    """Apply an ADVERT frame's array from the link ``link_id`` (the engine's name of it);
    the entries it held. A malformed frame or name raises ProtocolError (``bad_advert``
    for a name) and changes nothing."""
    full, entries, sticky, selectors, held = wire.decode_advert_held(value)
    for pattern, origin, _ in entries:
        try:
            validate_pattern(pattern)
            validate_broker_id(origin)
        except (InvalidTopic, ConfigError) as exc:
            raise ProtocolError("bad_advert", str(exc)) from exc
    engine.handle(
        AdvertIn(
            link=link_id,
            full=full,
            entries=entries,
            sticky=sticky,
            selectors=selectors,
            held=held,
        )
    )
    return len(entries)
