"""Topology files for the simulator: loading the TOML and checking every table, with
errors that name the file, table and key (the format is in :mod:`zbroker.simulate`)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from .config import check_patterns
from .errors import ConfigError, InvalidTopic
from .routing import LinkOptions

__all__ = ["checked", "flag", "int_in", "link_options", "load_topology", "table", "tables"]


def table(value: Any, where: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be a table, not {type(value).__name__}")
    unknown = set(value) - known
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(known))})"
        )
    return value


def tables(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: must be an array of tables ([[...]])")
    return value


def int_in(value: Any, where: str, lo: int, hi: int = 10**9) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise ConfigError(f"{where}: {value!r} is not an integer in {lo}..{hi}")
    return value


def flag(value: Any, where: str) -> bool:
    if type(value) is not bool:
        raise ConfigError(f"{where}: {value!r} is not true or false")
    return value


def checked(fn: Any, value: Any, where: str) -> str:
    try:
        result: str = fn(value)
    except (InvalidTopic, ConfigError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    return result


def link_options(link: dict[str, Any], where: str) -> LinkOptions:
    table(
        link,
        where,
        {"from", "to", "name", "duplex", "ttl", "conduit", "include", "exclude", "static"},
    )
    return LinkOptions(
        ttl=int_in(link.get("ttl", LinkOptions().ttl), f"{where}: ttl", 1, 255),
        conduit=flag(link.get("conduit", True), f"{where}: conduit"),
        include=check_patterns(link.get("include", []), f"{where}: include"),
        exclude=check_patterns(link.get("exclude", []), f"{where}: exclude"),
        static=check_patterns(link.get("static", []), f"{where}: static"),
    )


def load_topology(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text("utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read topology: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
    unknown = set(data) - {"simulation", "node", "link", "publish", "random"}
    if unknown:
        raise ConfigError(f"{p}: unknown table(s) {', '.join(sorted(unknown))}")
    data["_source"] = str(p)
    return data
