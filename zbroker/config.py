"""Node configuration: frozen dataclasses, loaded from TOML and validated.

Every error names where the bad value came from (file and key, or the keyword/flag) and the
value itself; unknown keys are errors, so a typo never silently falls back to a default.

File layout (all keys optional)::

    [node]
    id = "alpha"                  # broker ID; generated once and persisted if absent
    host = "127.0.0.1"            # interface to bind
    port = 7100                   # well-known port; PORT+1 publish, PORT+2 deliver; 0 = any
    data_dir = "/var/lib/zbroker" # identity (and later, the store)
    log_level = "info"

    [limits]
    max_frame_bytes = 1048576     # larger frames are counted and dropped
    hwm = 100000                  # socket high-water marks, messages

Precedence where several sources set a value: command-line flag > environment variable
(``ZBROKER_<KEY>``) > config file > default. :func:`load_config` reads a file;
:meth:`NodeConfig.replace` applies overrides with the same validation.
"""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .const import DEFAULT_HOST, DEFAULT_HWM, DEFAULT_MAX_FRAME_BYTES, DEFAULT_PORT
from .errors import ConfigError

__all__ = ["LOG_LEVELS", "NodeConfig", "default_data_dir", "load_config", "validate_broker_id"]

LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

_BROKER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def validate_broker_id(value: object, where: str = "broker id") -> str:
    """A broker ID: 1-64 characters of letters, digits, ``_ . -``, starting alphanumeric."""
    if not isinstance(value, str) or not _BROKER_ID.match(value):
        raise ConfigError(
            f"{where}: {value!r} is not a valid broker ID (1-64 characters of letters, "
            "digits, '_', '.', '-', starting with a letter or digit)"
        )
    return value


def default_data_dir(port: int) -> Path:
    """``$XDG_DATA_HOME/zbroker/node-PORT`` (``~/.local/share`` when XDG_DATA_HOME is unset)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "zbroker" / f"node-{port}"


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeConfig:
    """Everything a node needs to start. Build with keywords, :func:`load_config` or
    :meth:`replace`; every path validates in :meth:`__post_init__`."""

    broker_id: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    data_dir: Path | None = None
    log_level: str = "info"
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    hwm: int = DEFAULT_HWM
    #: where the values came from, for error messages ("file.toml", "keyword", ...)
    source: str = field(default="keyword", compare=False)

    def __post_init__(self) -> None:
        src = self.source
        if self.broker_id is not None:
            validate_broker_id(self.broker_id, f"{src}: node.id")
        if not isinstance(self.host, str) or not self.host or any(c in self.host for c in " /"):
            raise ConfigError(f"{src}: node.host: {self.host!r} is not a host name or address")
        _check_int(self.port, f"{src}: node.port", 0, 65533)
        if self.data_dir is not None and not isinstance(self.data_dir, Path):
            object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.log_level not in LOG_LEVELS:
            raise ConfigError(
                f"{src}: node.log_level: {self.log_level!r} is not one of {', '.join(LOG_LEVELS)}"
            )
        _check_int(self.max_frame_bytes, f"{src}: limits.max_frame_bytes", 64, 1 << 30)
        _check_int(self.hwm, f"{src}: limits.hwm", 1, 10_000_000)

    def replace(self, **changes: Any) -> NodeConfig:
        """A copy with ``changes`` applied (``None`` values are ignored), validated again."""
        real = {k: v for k, v in changes.items() if v is not None}
        unknown = set(real) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown option(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **real)


def _check_int(value: object, where: str, lo: int, hi: int) -> None:
    if type(value) is not int:
        raise ConfigError(f"{where}: {value!r} is not an integer")
    if not lo <= value <= hi:
        raise ConfigError(f"{where}: {value} is out of range ({lo}..{hi})")


# TOML table -> {toml key: dataclass field}
_SCHEMA: dict[str, dict[str, str]] = {
    "node": {
        "id": "broker_id",
        "host": "host",
        "port": "port",
        "data_dir": "data_dir",
        "log_level": "log_level",
    },
    "limits": {"max_frame_bytes": "max_frame_bytes", "hwm": "hwm"},
}


def config_from_mapping(data: dict[str, Any], source: str) -> NodeConfig:
    """Build a NodeConfig from parsed TOML; unknown tables and keys are errors."""
    kwargs: dict[str, Any] = {}
    for table, value in data.items():
        keys = _SCHEMA.get(table)
        if keys is None:
            raise ConfigError(
                f"{source}: unknown table [{table}] (known: {', '.join(f'[{t}]' for t in _SCHEMA)})"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {table} must be a table, not {type(value).__name__}")
        for key, item in value.items():
            name = keys.get(key)
            if name is None:
                raise ConfigError(
                    f"{source}: unknown key {table}.{key} (known: {', '.join(sorted(keys))})"
                )
            if name == "data_dir":
                if not isinstance(item, str):
                    raise ConfigError(f"{source}: {table}.{key}: {item!r} is not a path string")
                item = Path(item).expanduser()
            kwargs[name] = item
    return NodeConfig(source=source, **kwargs)


def load_config(path: str | os.PathLike[str]) -> NodeConfig:
    """Load and validate a TOML config file."""
    p = Path(path)
    try:
        text = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config file: {exc.strerror}") from exc
    try:
        data = tomllib.loads(text.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
    return config_from_mapping(data, str(p))
