"""Value checks shared by every config object: each raises ConfigError naming where the
value came from (file and key, or the keyword/flag) and the value itself."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..errors import ConfigError, InvalidTopic
from ..names import validate_broker_id
from ..topics import validate_pattern

__all__ = ["check_float", "check_int", "check_patterns", "is_tcp_host_port", "validate_broker_id"]


def check_int(value: object, where: str, lo: int, hi: int) -> None:
    """``value`` is an int (not a bool) in ``lo..hi``."""
    if type(value) is not int:
        raise ConfigError(f"{where}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: {value} is out of range ({lo}..{hi})")


def check_float(value: object, where: str, lo: float, hi: float) -> float:
    """``value`` is a number (int or float, not a bool) in ``lo..hi``; returned as float."""
    if type(value) not in (int, float):
        raise ConfigError(f"{where}: {value!r} is not a number")
    assert isinstance(value, int | float)
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: {value} is out of range ({lo:g}..{hi:g})")
    return float(value)


def check_patterns(value: object, where: str) -> tuple[str, ...]:
    """``value`` is a list (or tuple) of valid subscription patterns; returned as a tuple."""
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ConfigError(f"{where}: {value!r} is not a list of patterns")
    for p in value:
        try:
            validate_pattern(p)
        except InvalidTopic as exc:
            raise ConfigError(f"{where}: {exc}") from exc
    return tuple(value)


def is_tcp_host_port(uri: str) -> bool:
    """``tcp://HOST:PORT`` a link can dial: a host (name, IPv4, or IPv6 in brackets), a port
    from 1 to 65535, nothing after it."""
    if not uri.startswith("tcp://"):
        return False
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:  # a port that is not a number, or out of range
        return False
    return (
        bool(parts.hostname)
        and parts.hostname != "*"
        and port is not None
        and port >= 1
        and not parts.path
        and not parts.query
        and not parts.fragment
    )
