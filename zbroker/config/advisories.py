"""``[advisories]``: the node's events on reserved topics, and its ``$SYS``-style STATS.

::

    [advisories]
    enabled = true          # false: no advisories and no STATS (the feature is not run)
    sys_interval = 10.0     # seconds between $ZB.SYS.<id>.STATS; 0 = no STATS
    rate_limit = 100        # advisories this node publishes per rate_window, at most
    rate_window = 1.0       # seconds; what is over the limit is counted as suppressed
    summary_interval = 5.0  # seconds: NO_SUBSCRIBER and DROPS summarize at most this often
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import ConfigError
from .checks import check_float, check_int

__all__ = ["ADVISORY_KEYS", "AdvisoryConfig"]

#: the longest interval or window accepted (a day)
_DAY = 86_400.0


@dataclass(frozen=True, slots=True, kw_only=True)
class AdvisoryConfig:
    enabled: bool = True
    sys_interval: float = 10.0
    rate_limit: int = 100
    rate_window: float = 1.0
    summary_interval: float = 5.0
    source: str = dataclasses.field(default="keyword", compare=False)

    def __post_init__(self) -> None:
        src = self.source
        if type(self.enabled) is not bool:
            raise ConfigError(f"{src}: advisories.enabled must be true or false")
        if not (type(self.sys_interval) in (int, float) and self.sys_interval == 0):  # 0: off
            interval = check_float(self.sys_interval, f"{src}: advisories.sys_interval", 0.05, _DAY)
            object.__setattr__(self, "sys_interval", interval)
        check_int(self.rate_limit, f"{src}: advisories.rate_limit", 1, 1_000_000)
        window = check_float(self.rate_window, f"{src}: advisories.rate_window", 0.01, _DAY)
        object.__setattr__(self, "rate_window", window)
        summary = check_float(
            self.summary_interval, f"{src}: advisories.summary_interval", 0.05, _DAY
        )
        object.__setattr__(self, "summary_interval", summary)

    @classmethod
    def from_mapping(cls, value: object, source: str) -> AdvisoryConfig:
        """An ``[advisories]`` table (or keyword dict); unknown keys are errors."""
        if isinstance(value, AdvisoryConfig):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: advisories must be a table, not {type(value).__name__}")
        unknown = set(value) - ADVISORY_KEYS
        if unknown:
            raise ConfigError(
                f"{source}: unknown key(s) advisories.{', advisories.'.join(sorted(unknown))} "
                f"(known: {', '.join(sorted(ADVISORY_KEYS))})"
            )
        fields: dict[str, Any] = dict(value)
        return cls(source=source, **fields)


#: the keys of ``[advisories]``
ADVISORY_KEYS = frozenset(f.name for f in dataclasses.fields(AdvisoryConfig) if f.name != "source")
