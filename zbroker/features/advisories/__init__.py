"""Advisories: the node's events on reserved topics (``$ZB.ADVISORY.<id>.<KIND>``) and its
periodic ``$ZB.SYS.<id>.STATS`` (see docs/advisories.md for every kind's payload)."""

from .feature import Advisories
from .kinds import ADVISORY_PREFIX, KINDS, SUMMARY_KINDS, SYS_PREFIX, advisory_topic, stats_topic

__all__ = [
    "ADVISORY_PREFIX",
    "KINDS",
    "SUMMARY_KINDS",
    "SYS_PREFIX",
    "Advisories",
    "advisory_topic",
    "stats_topic",
]
