"""Staged writes: rows a writer hands to a node now and the node publishes only on
commit, exactly once (:mod:`.rows` holds the sans-IO state; :mod:`.feature` serves the
requests and publishes committed rows a slice per pass)."""

from .feature import APPLY_SLICE, StagedWrites
from .rows import DEFAULT_STAGE_MAX_BYTES, DEFAULT_STAGE_TTL, StagedRow, Staging, StagingError

__all__ = [
    "APPLY_SLICE",
    "DEFAULT_STAGE_MAX_BYTES",
    "DEFAULT_STAGE_TTL",
    "StagedRow",
    "StagedWrites",
    "Staging",
    "StagingError",
]
