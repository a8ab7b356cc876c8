"""What an interest key stands for when it is not a plain pattern.

Two kinds of interest travel under reserved keys: a queue group's members of a pattern
(:func:`group_key`: ``$ZB.Q.<group>.<pattern>``) and a host of a hosted branch
(``$ZB.HOST.<branch>``, :mod:`.hosts`). Whatever judges interest by the topics it may
draw — a link's include/exclude filter, a local or flooded branch — judges such a key by
the pattern it stands for (:func:`judged_pattern`): a link that refuses ``ORDERS.>``
refuses a group's members of ``ORDERS.x`` too, and a filter that admits ``ORDERS.>``
admits them (their key alone is a ``$ZB`` name no such filter matches).
"""

from __future__ import annotations

from .hosts import filter_pattern

__all__ = ["GROUP_PREFIX", "group_key", "judged_pattern", "split_key"]

GROUP_PREFIX = "$ZB.Q."


def group_key(group: str, pattern: str) -> str:
    """The interest pattern that stands for members of ``group`` on ``pattern``. A group
    name (a broker-ID-like name) may hold dots; as one segment they become ``:``, which
    no group name holds."""
    return GROUP_PREFIX + group.replace(".", ":") + "." + pattern


def split_key(key: str) -> tuple[str, str] | None:
    """(group, pattern) of a group key; None for any other pattern."""
    if not key.startswith(GROUP_PREFIX):
        return None
    group, _, pattern = key[len(GROUP_PREFIX) :].partition(".")
    if not group or not pattern:
        return None
    return group.replace(":", "."), pattern


def judged_pattern(key: str) -> str:
    """The pattern filters and branches judge interest key ``key`` by: a group key by its
    pattern, a host key by its branch, any other by itself."""
    if key.startswith(GROUP_PREFIX):
        parts = split_key(key)
        if parts is not None:
            return parts[1]
    return filter_pattern(key)
