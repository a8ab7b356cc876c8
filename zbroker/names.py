"""Names that are not topics: broker IDs, link names, durable names. One rule for all:
1-64 characters of letters, digits, ``_ . -``, starting with a letter or digit (safe in a
routing id, a path of broker IDs, a file name and an mDNS instance name)."""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = ["validate_broker_id"]

_BROKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def validate_broker_id(value: object, where: str = "broker ID") -> str:
    """A broker ID, or another name (``where`` says which: a link, a queue group, a
    durable, ...): 1-64 characters of letters, digits, ``_ . -``, starting alphanumeric."""
    if not isinstance(value, str) or not _BROKER_ID.fullmatch(value):
        raise ConfigError(
            f"{where}: {value!r} is not a valid name (1-64 characters of letters, "
            "digits, '_', '.', '-', starting with a letter or digit)"
        )
    return value
